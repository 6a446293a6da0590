"""The driver configuration: a YAML file plus flags, the flag winning; strict about what it
accepts and precise about what it refuses."""

from __future__ import annotations

import argparse
import dataclasses
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from logformats import klog_lines

from dracpu.core import log
from dracpu.core.cli import ArgumentParser
from dracpu.core.config import (
    DriverConfig,
    add_config_flags,
    load,
    log_effective,
    warn_deprecated,
)
from dracpu.core.config_model import FIELDS, ConfigField
from dracpu.core.errors import ConfigError, InvalidInputError


def parse(*argv: str) -> DriverConfig:
    parser = ArgumentParser(prog="test")
    add_config_flags(parser)
    return load(parser.parse_args(list(argv)))


def config_file(tmp_path: Path, content: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(content)
    return str(path)


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    log.setup(0, "test", stream=stream)
    yield stream
    log.setup(0)


def test_defaults() -> None:
    config = parse()
    assert config.cpu_device_mode == "grouped"
    assert config.group_by == "numanode"
    assert config.allocator == "cpumanager"
    assert config.reserved_cpus == ""
    assert config.publish_node_allocatable_resource_mapping is False
    assert config.to_document() == {
        "apiVersion": "v1alpha1",
        "cpuDeviceMode": "grouped",
        "groupBy": "numanode",
        "allocator": "cpumanager",
        "reservedCPUs": "",
        "hostnameOverride": "",
        "kubeconfig": "",
        "publishNodeAllocatableResourceMapping": False,
        "sysfsRoot": "",
        "sysfsOverlay": "",
        "minSharedCPUs": 1,
        "memoryPlacement": "none",
        "publishMemoryDevices": False,
    }


def test_every_reference_field_is_read_from_the_file(tmp_path: Path) -> None:
    path = config_file(
        tmp_path,
        "apiVersion: v1alpha1\n"
        "cpuDeviceMode: individual\n"
        "groupBy: socket\n"
        "reservedCPUs: 3,0-1\n"
        "hostnameOverride: node-a\n"
        "kubeconfig: /etc/kube.conf\n"
        "publishNodeAllocatableResourceMapping: true\n"
        "sysfsRoot: /host/sys\n",
    )
    config = parse("--config", path)
    assert config.cpu_device_mode == "individual"
    assert config.group_by == "socket"
    assert config.reserved_cpus == "0-1,3"
    assert config.reserved.format() == "0-1,3"
    assert config.hostname_override == "node-a"
    assert config.kubeconfig == "/etc/kube.conf"
    assert config.publish_node_allocatable_resource_mapping is True
    assert str(config.effective_sysfs_root()) == "/host/sys"


@pytest.mark.parametrize(
    ("flag", "value", "attribute"),
    [
        ("--group-by", "numanode", "group_by"),
        ("--allocator", "external", "allocator"),
        ("--cpu-device-mode", "individual", "cpu_device_mode"),
        ("--reserved-cpus", "0-3", "reserved_cpus"),
        ("--hostname-override", "node-b", "hostname_override"),
        ("--kubeconfig", "/flag/kubeconfig", "kubeconfig"),
        ("--sysfs-root", "/flag/sys", "sysfs_root"),
    ],
)
def test_an_explicit_flag_wins_over_the_file(
    flag: str, value: str, attribute: str, tmp_path: Path, log_lines: io.StringIO
) -> None:
    path = config_file(
        tmp_path,
        "groupBy: socket\ncpuDeviceMode: grouped\nreservedCPUs: '7'\n"
        "hostnameOverride: file\nkubeconfig: /file\nsysfsRoot: /file/sys\n",
    )
    assert getattr(parse("--config", path, flag, value), attribute) == value
    # Fields no flag touched still come from the file.
    others = parse("--config", path)
    assert others.group_by == "socket"
    assert others.reserved_cpus == "7"


@pytest.mark.parametrize(
    ("flag", "value", "field"),
    [
        ("--cpu-device-mode", "individual", "cpuDeviceMode"),
        ("--group-by", "socket", "groupBy"),
        ("--reserved-cpus", "0", "reservedCPUs"),
        ("--hostname-override", "x", "hostnameOverride"),
    ],
)
def test_deprecated_flags_work_and_warn(
    flag: str, value: str, field: str, log_lines: io.StringIO
) -> None:
    parse(flag, value)
    (line,) = klog_lines(log_lines.getvalue())
    assert (line.severity, line.msg) == ("W", "deprecated flag used")
    assert (line.values["flag"], line.values["replacement"]) == (flag, field)


def test_current_flags_do_not_warn(log_lines: io.StringIO) -> None:
    parse("--sysfs-root", "/x", "--kubeconfig", "/k", "--allocator", "external")
    assert log_lines.getvalue() == ""


@pytest.mark.parametrize("group_by", ["numanode", "socket", "machine"])
def test_the_external_allocator_serves_every_grouping(group_by: str, tmp_path: Path) -> None:
    # The reference's migration guide: grouped devices, the CPUs picked by a scheduler plugin.
    path = config_file(
        tmp_path, f"cpuDeviceMode: grouped\ngroupBy: {group_by}\nallocator: external\n"
    )
    config = parse("--config", path)
    assert (config.group_by, config.allocator) == (group_by, "external")
    assert config.to_document()["allocator"] == "external"


@pytest.mark.parametrize(
    ("content", "argv", "message"),
    [
        (
            "groupBy: machine\n",
            (),
            "groupBy 'machine' needs allocator 'external' (got 'cpumanager')",
        ),
        (
            "groupBy: machine\nallocator: cpumanager\n",
            (),
            "groupBy 'machine' needs allocator 'external' (got 'cpumanager')",
        ),
        (
            "groupBy: machine\nallocator: external\n",
            ("--allocator", "cpumanager"),
            "groupBy 'machine' needs allocator 'external'",
        ),
        (
            "cpuDeviceMode: individual\nallocator: external\n",
            (),
            "allocator 'external' needs cpuDeviceMode 'grouped' (got 'individual')",
        ),
        (
            "allocator: kubelet\n",
            (),
            "field 'allocator': Input should be 'cpumanager' or 'external'",
        ),
        ("allocator: true\n", (), "field 'allocator': Input should be"),
    ],
)
def test_allocator_combinations_are_refused_in_one_line(
    content: str, argv: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    path = config_file(tmp_path, content)
    with pytest.raises(ConfigError) as error:
        parse("--config", path, *argv)
    text = str(error.value)
    assert "\n" not in text
    assert text.startswith(f"config file {path}: ")
    assert message in text


def test_a_flag_completes_what_the_file_alone_would_refuse(tmp_path: Path) -> None:
    # The rule holds for the merged configuration, not for the file on its own.
    path = config_file(tmp_path, "groupBy: machine\n")
    assert parse("--config", path, "--allocator", "external").allocator == "external"


def test_the_allocator_flag_refuses_other_values(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--allocator", "scheduler")
    assert "invalid choice: 'scheduler'" in capsys.readouterr().err


def test_individual_mode_is_deprecated_with_one_warning(log_lines: io.StringIO) -> None:
    warn_deprecated(DriverConfig())
    assert log_lines.getvalue() == ""
    warn_deprecated(DriverConfig(cpu_device_mode="individual"))
    (line,) = log_lines.getvalue().splitlines()
    assert line.startswith("W")  # klog's severity letter: a warning
    assert "cpuDeviceMode 'individual' is deprecated" in line
    assert "allocator 'external'" in line
    assert "migrate-from-individual-mode" in line


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("groupBy: socket\nbindAddres: ':8080'\n", "unknown field 'bindAddres'"),
        ("apiVersion: v1beta1\n", "field 'apiVersion'"),
        ("apiVersion: 1\n", "field 'apiVersion'"),
        ("cpuDeviceMode: shared\n", "field 'cpuDeviceMode'"),
        ("groupBy: rack\n", "field 'groupBy'"),
        ("reservedCPUs: 0-3,,4\n", "field 'reservedCPUs': empty item in CPU list '0-3,,4'"),
        ("reservedCPUs: 5-2\n", "reversed range '5-2'"),
        ("publishNodeAllocatableResourceMapping: maybe\n", "publishNodeAllocatableResourceMapping"),
        (
            "minSharedCPUs: -1\n",
            "field 'minSharedCPUs': Input should be greater than or equal to 0",
        ),
        ("memoryPlacement: strict\n", "field 'memoryPlacement': Input should be 'local' or 'none'"),
        ("memoryPlacement: true\n", "field 'memoryPlacement': Input should be 'local' or 'none'"),
        ("- groupBy\n", "expected a YAML mapping, got list"),
        ("just text\n", "expected a YAML mapping, got str"),
        ("groupBy: a: b\n", "not valid YAML at line 1"),
        ("groupBy: [socket\n", "not valid YAML"),
        ("groupBy: socket\n\tbad: tab\n", "not valid YAML at line 2"),
    ],
)
def test_bad_files_are_refused_naming_file_and_field(
    content: str, message: str, tmp_path: Path
) -> None:
    path = config_file(tmp_path, content)
    with pytest.raises(ConfigError) as error:
        parse("--config", path)
    assert str(error.value).startswith(f"config file {path}")
    assert message in str(error.value)


def test_memory_placement_from_the_file_and_the_flag_which_wins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert parse().memory_placement == "none"
    path = config_file(tmp_path, "memoryPlacement: local\n")
    assert parse("--config", path).memory_placement == "local"
    assert parse("--config", path, "--memory-placement", "none").memory_placement == "none"
    assert parse("--memory-placement", "local").to_document()["memoryPlacement"] == "local"
    with pytest.raises(SystemExit):
        parse("--memory-placement", "strict")
    assert "argument --memory-placement: invalid choice: 'strict'" in capsys.readouterr().err


def test_publish_memory_devices_from_the_file_and_the_flag_which_wins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert parse().publish_memory_devices is False
    on = config_file(tmp_path, "publishMemoryDevices: true\n")
    assert parse("--config", on).publish_memory_devices is True
    assert parse("--config", on, "--no-publish-memory-devices").publish_memory_devices is False
    assert parse("--publish-memory-devices").to_document()["publishMemoryDevices"] is True
    with pytest.raises(SystemExit):
        parse("--publish-memory-devices=yes")
    assert "--no-publish-memory-devices: ignored explicit argument 'yes'" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["'yes'", "1", "on-ish", "null"])
def test_publish_memory_devices_takes_only_a_boolean(value: str, tmp_path: Path) -> None:
    path = config_file(tmp_path, f"publishMemoryDevices: {value}\n")
    with pytest.raises(ConfigError) as error:
        parse("--config", path)
    assert str(error.value) == (
        f"config file {path}: field 'publishMemoryDevices': Input should be a valid boolean"
    )


def test_api_version_may_be_absent_or_v1alpha1(tmp_path: Path) -> None:
    assert parse("--config", config_file(tmp_path, "groupBy: socket\n")).api_version is None
    with_version = parse("--config", config_file(tmp_path, "apiVersion: v1alpha1\n"))
    assert with_version.api_version == "v1alpha1"


def test_empty_file_is_the_defaults(tmp_path: Path) -> None:
    assert parse("--config", config_file(tmp_path, "")) == parse()


def test_missing_file_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"config file /nonexistent/x\.yaml: No such file"):
        parse("--config", "/nonexistent/x.yaml")


def test_bad_flag_value_names_the_flags_as_source() -> None:
    with pytest.raises(ConfigError, match="flags: field 'reservedCPUs'"):
        parse("--reserved-cpus", "x")


def test_config_errors_are_invalid_input() -> None:
    assert issubclass(ConfigError, InvalidInputError)


@pytest.mark.parametrize(
    ("sysfs_root", "host_root", "expected"),
    [("", None, "/sys"), ("", "/host", "/host/sys"), ("/mine", "/host", "/mine")],
)
def test_sysfs_root_precedence(
    sysfs_root: str,
    host_root: str | None,
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if host_root is None:
        monkeypatch.delenv("HOST_ROOT", raising=False)
    else:
        monkeypatch.setenv("HOST_ROOT", host_root)
    config = DriverConfig.model_validate({"sysfsRoot": sysfs_root})
    assert str(config.effective_sysfs_root()) == expected


def test_node_name_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "from-env")
    assert DriverConfig.model_validate({"hostnameOverride": "set"}).node_name() == "set"
    assert DriverConfig().node_name() == "from-env"
    monkeypatch.delenv("NODE_NAME")
    assert DriverConfig().node_name() != ""


def test_effective_configuration_is_logged_at_level_0(log_lines: io.StringIO) -> None:
    log_effective(DriverConfig.model_validate({"groupBy": "socket", "reservedCPUs": "0-1"}))
    (line,) = klog_lines(log_lines.getvalue())
    assert line.msg == "effective configuration"
    assert line.values["groupBy"] == "socket"
    assert line.values["reservedCPUs"] == "0-1"
    assert line.values["apiVersion"] == "v1alpha1"


# ---- the one model every reader, flag and schema is derived from -----------------------------

# The flags of the configuration: their spellings, what they take and whether they are
# deprecated, as every service has accepted them.
FLAGS = {
    "--kubeconfig": ("FILE", False),
    "--sysfs-root": ("DIR", False),
    "--sysfs-overlay": ("FILE", False),
    "--cpu-device-mode": ("{grouped,individual}", True),
    "--group-by": ("{numanode,socket,machine}", True),
    "--allocator": ("{cpumanager,external}", False),
    "--memory-placement": ("{local,none}", False),
    "--publish-memory-devices": (None, False),
    "--reserved-cpus": ("CPUSET", True),
    "--hostname-override": ("NAME", True),
}


def config_actions() -> dict[str, argparse.Action]:
    parser = ArgumentParser(prog="test")
    add_config_flags(parser)
    (group,) = [g for g in parser._action_groups if g.title == "driver configuration"]
    return {a.option_strings[0]: a for a in group._group_actions if a.dest != "config"}


def test_the_model_describes_every_field_of_the_configuration() -> None:
    assert [f.name for f in FIELDS] == [f.name for f in dataclasses.fields(DriverConfig)]
    assert {f.spelling for f in FIELDS} == set(DriverConfig().to_document())
    assert all(f.help and "\n" not in f.help for f in FIELDS)


def test_the_flags_derived_from_the_model_are_those_every_service_took() -> None:
    actions = config_actions()
    assert set(actions) == set(FLAGS)
    for flag, (takes, deprecated) in FLAGS.items():
        action = actions[flag]
        assert action.default is None, flag  # so an explicit flag is detectable
        if action.choices:
            assert "{" + ",".join(action.choices) + "}" == takes, flag
        else:
            assert action.metavar == takes, flag
        assert action.help is not None
        assert action.help.startswith("DEPRECATED") == deprecated, flag
    assert actions["--publish-memory-devices"].option_strings == [
        "--publish-memory-devices",
        "--no-publish-memory-devices",
    ]


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.spelling)
def test_a_field_with_a_flag_names_it_in_its_help(field: ConfigField) -> None:
    if field.flag is None:
        assert field.flag_name not in config_actions()
        return
    assert field.spelling in (config_actions()[field.flag_name].help or "")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "minSharedCPUs: 65537\n",
            "field 'minSharedCPUs': Input should be less than or equal to 65536",
        ),
        ("minSharedCPUs: 65536\n", None),
        ("minSharedCPUs: 0\n", None),
        ("minSharedCPUs: true\n", "field 'minSharedCPUs': Input should be a valid integer"),
        ("minSharedCPUs: '2'\n", "field 'minSharedCPUs': Input should be a valid integer"),
        ("hostnameOverride: 3\n", "field 'hostnameOverride': Input should be a valid string"),
        ("apiVersion: null\n", None),
        ("group_by: socket\n", None),
    ],
)
def test_every_kind_of_field_is_checked_by_its_model(
    content: str, message: str | None, tmp_path: Path
) -> None:
    path = config_file(tmp_path, content)
    if message is None:
        parse("--config", path)
        return
    with pytest.raises(ConfigError) as error:
        parse("--config", path)
    assert str(error.value) == f"config file {path}: {message}"
