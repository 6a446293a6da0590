"""The kubelet's side: DRA prepare and unprepare, plugin registration, device health and the device
metadata files."""
