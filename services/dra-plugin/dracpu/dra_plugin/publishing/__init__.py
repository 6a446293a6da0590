"""The node's ResourceSlices: what they hold, how they are written, and the watch that notices when
someone else changes them."""
