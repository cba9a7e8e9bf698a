"""The daemon's configuration: defaults, the TOML file, overrides, flags and errors."""

from __future__ import annotations

import ipaddress
import json
import tomllib
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gnutella_router.config import (
    Config,
    ConfigError,
    config_as_dict,
    config_as_toml,
    load_config,
    parse_host_port,
)
from gnutella_router.config.sections import (
    CatcherConfig,
    LogConfig,
    NetworkConfig,
    NodeConfig,
    RouterConfig,
    SlowPeerConfig,
)

FULL_FILE = """\
[node]
listen = "[::1]:7000"
advertise = "203.0.113.5:7001"
user_agent = "test-router/9"
guid = "00112233445566778899AABBCCDDEEFF"
state_dir = "/var/lib/gnutella"

[network]
max_connections = 64
max_ttl = 5
hard_ttl_limit = 12
max_payload = 4096
allow_private_addresses = false
handshake_timeout = 3
connects_per_ip_per_minute = 2
deflate = false

[slow_peer]
policy = "flow-control"
threshold_messages = 200
threshold_bytes = 1_000_000
queue_bytes = 200_000
flow_control_enter = 0.75
flow_control_leave = 0.5
flow_control_timeout = 90
unbounded_experiment = true

[router]
queue_threshold = 2000
batch_size = 64
threads = 2
max_threads = 8
query_delay_ms = 1.5
ping_route_seconds = 60
query_route_seconds = 150.5
push_route_seconds = 200
route_table_capacity = 1000
pong_cache_seconds = 5
pongs_per_ping = 3

[catcher]
seeds = ["10.0.0.1:6346", "[2001:db8::1]:6346", "peer.example.org:6347"]
gwebcache = "http://cache.example.org:8080/gwc.php"
min_connections = 8
host_cache_size = 500
host_cache_file = "cache/hosts.txt"
save_interval = 30
dial_timeout = 4.5
backoff_initial = 1
backoff_max = 60

[log]
format = "json"
level = "debug"
"""


def write(tmp_path: Path, text: str, name: str = "router.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def flatten(tables: dict[str, dict[str, object]]) -> dict[str, object]:
    return {
        f"{section}.{key}": value
        for section, values in tables.items()
        for key, value in values.items()
    }


class TestDefaults:
    def test_no_file_gives_a_local_node_that_joins_nothing(self) -> None:
        config = load_config()
        assert config == Config()
        assert config.node.listen == "127.0.0.1:6346"
        assert config.node.listen_address == ("127.0.0.1", 6346)
        assert config.node.advertise == ""
        assert config.node.guid_bytes is None
        assert config.catcher.seeds == ()
        assert config.catcher.gwebcache == ""
        assert config.network.max_ttl == 7
        assert config.network.hard_ttl_limit == 15
        assert config.slow_peer.policy == "threshold"
        assert config.router.queue_threshold == 1000
        assert config.log.format == "auto"
        assert config.host_cache_path == Path(".gnutella-router") / "hosts.txt"

    def test_an_empty_file_is_the_defaults(self, tmp_path: Path) -> None:
        assert load_config(write(tmp_path, "")) == Config()

    def test_sections_are_frozen_and_slotted(self) -> None:
        config = load_config()
        with pytest.raises(AttributeError):
            config.network.max_ttl = 3  # type: ignore[misc]
        with pytest.raises(AttributeError):
            config.node = NodeConfig()  # type: ignore[misc]
        assert not hasattr(config.network, "__dict__")
        assert not hasattr(config, "__dict__")


class TestFile:
    def test_every_setting_is_read(self, tmp_path: Path) -> None:
        config = load_config(write(tmp_path, FULL_FILE))
        assert config.node == NodeConfig(
            listen="[::1]:7000",
            advertise="203.0.113.5:7001",
            user_agent="test-router/9",
            guid="00112233445566778899AABBCCDDEEFF",
            state_dir="/var/lib/gnutella",
        )
        assert config.node.listen_address == ("::1", 7000)
        assert config.node.guid_bytes == bytes.fromhex("00112233445566778899aabbccddeeff")
        assert config.network == NetworkConfig(
            max_connections=64,
            max_ttl=5,
            hard_ttl_limit=12,
            max_payload=4096,
            allow_private_addresses=False,
            handshake_timeout=3.0,
            connects_per_ip_per_minute=2,
            deflate=False,
        )
        assert config.slow_peer == SlowPeerConfig(
            policy="flow-control",
            threshold_messages=200,
            threshold_bytes=1_000_000,
            queue_bytes=200_000,
            flow_control_enter=0.75,
            flow_control_leave=0.5,
            flow_control_timeout=90.0,
            unbounded_experiment=True,
        )
        assert config.router == RouterConfig(
            queue_threshold=2000,
            batch_size=64,
            threads=2,
            max_threads=8,
            query_delay_ms=1.5,
            ping_route_seconds=60.0,
            query_route_seconds=150.5,
            push_route_seconds=200.0,
            route_table_capacity=1000,
            pong_cache_seconds=5.0,
            pongs_per_ping=3,
        )
        assert config.catcher == CatcherConfig(
            seeds=("10.0.0.1:6346", "[2001:db8::1]:6346", "peer.example.org:6347"),
            gwebcache="http://cache.example.org:8080/gwc.php",
            min_connections=8,
            host_cache_size=500,
            host_cache_file="cache/hosts.txt",
            save_interval=30.0,
            dial_timeout=4.5,
            backoff_initial=1.0,
            backoff_max=60.0,
        )
        assert config.catcher.seed_addresses == (
            ("10.0.0.1", 6346),
            ("2001:db8::1", 6346),
            ("peer.example.org", 6347),
        )
        assert config.log == LogConfig(format="json", level="debug")
        assert config.host_cache_path == Path("/var/lib/gnutella/cache/hosts.txt")

    def test_integers_become_floats_where_floats_are_expected(self, tmp_path: Path) -> None:
        config = load_config(write(tmp_path, "[network]\nhandshake_timeout = 3\n"))
        assert type(config.network.handshake_timeout) is float

    def test_a_partial_file_keeps_the_other_defaults(self, tmp_path: Path) -> None:
        config = load_config(write(tmp_path, '[catcher]\nseeds = ["10.0.0.1:6346"]\n'))
        assert config.catcher.seeds == ("10.0.0.1:6346",)
        assert msgspec.structs.replace(config, catcher=CatcherConfig()) == Config()

    def test_choices_ignore_case(self, tmp_path: Path) -> None:
        path = write(tmp_path, '[log]\nlevel = "WARNING"\n[slow_peer]\npolicy = "Flow-Control"\n')
        config = load_config(path)
        assert config.log.level == "warning"
        assert config.slow_peer.policy == "flow-control"


# (dotted key, bad value, words the message must contain)
BAD_VALUES: list[tuple[str, object, str]] = [
    ("node.listen", "127.0.0.1", "missing :PORT"),
    ("node.listen", "127.0.0.1:65536", "65535"),
    ("node.listen", "::1:6346", "brackets"),
    ("node.listen", 6346, "HOST:PORT"),
    ("node.advertise", "localhost:6346", "IPv4"),
    ("node.advertise", "1.2.3.4:0", "1 to 65535"),
    ("node.advertise", "[::1]:6346", "IPv4"),
    ("node.user_agent", "", "printable ASCII"),
    ("node.user_agent", "evil\r\nX-Header: 1", "printable ASCII"),
    ("node.user_agent", "x" * 201, "1 to 200"),
    ("node.guid", "0123", "32 hex digits"),
    ("node.guid", "g" * 32, "32 hex digits"),
    ("node.state_dir", "", "non-empty path"),
    ("node.state_dir", "a\0b", "NUL"),
    ("node.state_dir", "\udcff", "Unicode"),
    ("node.state_dir", 5, "path"),
    ("network.max_connections", 0, "1 to 10000"),
    ("network.max_connections", True, "integer"),
    ("network.max_connections", 32.0, "integer"),
    ("network.max_ttl", 0, "1 to 15"),
    ("network.max_ttl", 16, "1 to 15"),
    ("network.max_ttl", "7", "integer"),
    ("network.hard_ttl_limit", 6, "at least network.max_ttl (7)"),
    ("network.hard_ttl_limit", 256, "to 255"),
    ("network.max_payload", 1023, "1024 to 65536"),
    ("network.max_payload", 65537, "1024 to 65536"),
    ("network.allow_private_addresses", 1, "true or false"),
    ("network.allow_private_addresses", "yes", "true or false"),
    ("network.handshake_timeout", 0, "above 0"),
    ("network.handshake_timeout", -1.5, "above 0"),
    ("network.handshake_timeout", float("inf"), "at most 600"),
    ("network.handshake_timeout", float("nan"), "number"),
    ("network.handshake_timeout", False, "number"),
    ("network.connects_per_ip_per_minute", 0, "from 1"),
    ("network.connections_per_address", 0, "from 1"),
    ("network.connections_per_address", 1.5, "integer"),
    ("network.idle_timeout", -1, "from 0"),
    ("network.idle_timeout", 1e9, "from 0 to 86400"),
    ("network.partial_message_timeout", -0.5, "from 0"),
    ("network.partial_message_timeout", "60", "number"),
    ("network.deflate", "true", "true or false"),
    ("slow_peer.policy", "drop", "'threshold', 'flow-control'"),
    ("slow_peer.policy", None, "'threshold'"),
    ("slow_peer.threshold_messages", 0, "unbounded_experiment"),
    ("slow_peer.threshold_messages", -1, "integer"),
    ("slow_peer.threshold_bytes", 0, "integer from 1"),
    ("slow_peer.threshold_bytes", 65558, "largest size allowed (65559 bytes"),
    ("slow_peer.queue_bytes", 65536, "largest size allowed"),
    ("slow_peer.flow_control_enter", 0, "above 0"),
    ("slow_peer.flow_control_enter", 1.5, "at most 1"),
    ("slow_peer.flow_control_enter", 0.25, "below slow_peer.flow_control_enter"),
    ("slow_peer.flow_control_leave", 0.5, "below slow_peer.flow_control_enter (0.5)"),
    ("slow_peer.flow_control_leave", 0, "above 0"),
    ("slow_peer.flow_control_timeout", 0, "above 0"),
    ("slow_peer.unbounded_experiment", 0, "true or false"),
    ("router.queue_threshold", 0, "router.unbounded_experiment"),
    ("router.queue_threshold", -1, "integer from 0"),
    ("router.unbounded_experiment", 0, "true or false"),
    ("router.batch_size", 0, "from 1"),
    ("router.threads", 0, "from 1"),
    ("router.threads", 21, "must not exceed router.max_threads (20)"),
    ("router.max_threads", 0, "from 1"),
    ("router.max_threads", 2000, "to 1024"),
    ("router.query_delay_ms", -0.1, "from 0"),
    ("router.query_delay_ms", "5", "number"),
    ("router.ping_route_seconds", 0, "above 0"),
    ("router.query_route_seconds", -300, "above 0"),
    ("router.push_route_seconds", 1e9, "at most 86400"),
    ("router.route_table_capacity", 0, "from 1"),
    ("router.pong_cache_seconds", 0, "above 0"),
    ("router.pongs_per_ping", 0, "from 1"),
    ("catcher.seeds", "10.0.0.1:6346", "list"),
    ("catcher.seeds", ["10.0.0.1:6346", "nope"], "'nope'"),
    ("catcher.seeds", ["10.0.0.1:0"], "1 to 65535"),
    ("catcher.seeds", [6346], "HOST:PORT"),
    ("catcher.gwebcache", "https://cache.example.org/", "http://"),
    ("catcher.gwebcache", "cache.example.org", "http://"),
    ("catcher.gwebcache", "http://", "http://"),
    ("catcher.gwebcache", "http://host:99999/", "http://"),
    ("catcher.gwebcache", "http://host/a b", "spaces"),
    ("catcher.min_connections", -1, "integer from 0"),
    ("catcher.min_connections", 33, "must not exceed network.max_connections (32)"),
    ("catcher.host_cache_size", 0, "from 1"),
    ("catcher.host_cache_file", "", "non-empty"),
    ("catcher.save_interval", 0, "above 0"),
    ("catcher.dial_timeout", 0, "above 0"),
    ("catcher.backoff_initial", 301, "must not exceed catcher.backoff_max (300)"),
    ("catcher.backoff_max", 0, "above 0"),
    ("log.format", "xml", "'auto', 'console', 'json'"),
    ("log.level", "trace", "'debug', 'info', 'warning', 'error'"),
    ("log.level", 10, "one of"),
]


def _toml_can_say(value: object) -> bool:
    try:
        tomllib.loads(f"x = {json.dumps(value)}")
    except (tomllib.TOMLDecodeError, ValueError):
        return False
    return True


# The first bad value of each setting that a TOML file can express.
_first_per_key = {
    key: (key, value, words) for key, value, words in reversed(BAD_VALUES) if _toml_can_say(value)
}
FILE_CASES = list(_first_per_key.values())


class TestValidation:
    @pytest.mark.parametrize(("key", "value", "words"), BAD_VALUES)
    def test_a_bad_value_is_refused_naming_key_value_and_rule(
        self, key: str, value: object, words: str
    ) -> None:
        # flow_control_enter below the default leave fails the cross-field rule, which
        # blames the leave ratio: the pair is wrong, and leave is the one to adjust.
        blamed = "slow_peer.flow_control_leave" if words.startswith("below slow") else key
        with pytest.raises(ConfigError) as caught:
            load_config(overrides={key: value})
        assert caught.value.key == blamed
        message = str(caught.value)
        assert message.startswith(f"{blamed} = ")
        assert words in message

    @pytest.mark.parametrize(("key", "value", "words"), FILE_CASES)
    def test_the_file_is_held_to_the_same_rules(
        self, tmp_path: Path, key: str, value: object, words: str
    ) -> None:
        section, name = key.split(".")
        path = write(tmp_path, f"[{section}]\n{name} = {json.dumps(value)}\n")
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        assert caught.value.key == key
        assert words in str(caught.value)

    @pytest.mark.parametrize("key", sorted(flatten(config_as_dict(Config()))))
    def test_every_setting_checks_its_type(self, key: str) -> None:
        default = flatten(config_as_dict(Config()))[key]
        wrong: object = {bool: 1, int: "1", float: "1.0", str: 1, list: "x:1"}[type(default)]
        with pytest.raises(ConfigError) as caught:
            load_config(overrides={key: wrong})
        assert caught.value.key == key

    def test_zero_thresholds_are_for_experiments_only(self) -> None:
        config = load_config(
            overrides={"slow_peer.threshold_messages": 0, "slow_peer.unbounded_experiment": True}
        )
        assert config.slow_peer.threshold_messages == 0

    def test_an_unbounded_router_queue_is_for_experiments_only(self) -> None:
        config = load_config(
            overrides={"router.queue_threshold": 0, "router.unbounded_experiment": True}
        )
        # The stage gets a bound no memory could reach; the governor's threshold, which
        # must not exceed the bound, is then free.
        assert config.router.queue_bound > 2**40
        assert load_config().router.queue_bound == 1000
        enabled = load_config(
            overrides={
                "router.queue_threshold": 0,
                "router.unbounded_experiment": True,
                "governor.enabled": True,
                "governor.threshold": 1_000_000,
            }
        )
        assert enabled.governor.threshold == 1_000_000

    def test_shedding_needs_a_bounded_router_queue(self) -> None:
        with pytest.raises(ConfigError) as caught:
            load_config(
                overrides={
                    "router.queue_threshold": 0,
                    "router.unbounded_experiment": True,
                    "shedding.policy": "red",
                }
            )
        assert caught.value.key == "shedding.policy"
        assert "router.queue_threshold is 0" in str(caught.value)

    def test_limits_inside_the_ranges_are_accepted(self) -> None:
        config = load_config(
            overrides={
                "network.max_ttl": 15,
                "network.hard_ttl_limit": 255,
                "network.max_payload": 1024,
                "slow_peer.queue_bytes": 1024 + 23,
                "slow_peer.threshold_bytes": 1024 + 23,
                "slow_peer.flow_control_enter": 1,
                "slow_peer.flow_control_leave": 0.999,
                "router.threads": 20,
                "router.query_delay_ms": 0,
                "catcher.min_connections": 0,
                "catcher.backoff_initial": 300,
                "node.listen": "localhost:0",
            }
        )
        assert config.network.max_ttl == 15
        assert config.node.listen_address == ("localhost", 0)

    def test_direct_construction_and_replace_validate_too(self) -> None:
        with pytest.raises(ConfigError, match=r"network\.max_ttl = 0"):
            NetworkConfig(max_ttl=0)
        config = load_config()
        with pytest.raises(ConfigError, match=r"catcher\.min_connections"):
            msgspec.structs.replace(config, network=NetworkConfig(max_connections=2))
        replaced = msgspec.structs.replace(config.router, query_delay_ms=5)
        assert replaced.query_delay_ms == 5.0


class TestUnknownNames:
    def test_a_misspelt_key_is_named_with_a_suggestion(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError) as caught:
            load_config(write(tmp_path, "[network]\nmax_tll = 5\n"))
        assert caught.value.key == "network.max_tll"
        assert "did you mean network.max_ttl?" in str(caught.value)

    def test_a_misspelt_section_is_named_with_a_suggestion(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError) as caught:
            load_config(write(tmp_path, "[netwrok]\nmax_ttl = 5\n"))
        assert caught.value.key == "netwrok"
        assert "did you mean network?" in str(caught.value)

    def test_a_setting_outside_its_table_points_at_the_table(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError) as caught:
            load_config(write(tmp_path, "max_ttl = 5\n"))
        assert caught.value.key == "max_ttl"
        assert "network.max_ttl" in str(caught.value)

    def test_a_section_must_be_a_table(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match=r"network must be a table") as caught:
            load_config(write(tmp_path, "network = 5\n"))
        assert caught.value.key == "network"

    def test_a_nested_table_is_an_unknown_key(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError) as caught:
            load_config(write(tmp_path, "[network.extra]\nx = 1\n"))
        assert caught.value.key == "network.extra"

    @pytest.mark.parametrize(
        ("dotted", "blamed"),
        [("network.nope", "network.nope"), ("nope.max_ttl", "nope"), ("network", "network")],
    )
    def test_unknown_override_keys(self, dotted: str, blamed: str) -> None:
        with pytest.raises(ConfigError) as caught:
            load_config(overrides={dotted: 1})
        assert caught.value.key == blamed


class TestUnreadableFiles:
    def test_missing_file(self, tmp_path: Path) -> None:
        path = tmp_path / "absent.toml"
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        assert caught.value.key is None
        assert str(path) in str(caught.value)

    def test_bad_toml_carries_the_parser_message(self, tmp_path: Path) -> None:
        path = write(tmp_path, "[network\nmax_ttl = 3\n")
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        try:
            tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            expected = str(exc)
        assert caught.value.key is None
        assert str(path) in str(caught.value)
        assert expected in str(caught.value)

    def test_a_file_that_is_not_utf8(self, tmp_path: Path) -> None:
        path = tmp_path / "latin1.toml"
        path.write_bytes(b'[node]\nuser_agent = "caf\xe9"\n')
        with pytest.raises(ConfigError, match=r"latin1\.toml"):
            load_config(path)


class TestOverrides:
    def test_overrides_beat_the_file(self, tmp_path: Path) -> None:
        path = write(tmp_path, '[network]\nmax_ttl = 5\n[catcher]\nseeds = ["10.0.0.1:6346"]\n')
        config = load_config(
            path, {"network.max_ttl": 3, "catcher.seeds": ["10.0.0.2:6346"], "log.level": "error"}
        )
        assert config.network.max_ttl == 3
        assert config.catcher.seeds == ("10.0.0.2:6346",)
        assert config.log.level == "error"

    def test_overrides_are_validated_with_the_file(self, tmp_path: Path) -> None:
        """A value is judged with the final state: the file's max_ttl, the override's limit."""
        path = write(tmp_path, "[network]\nmax_ttl = 9\n")
        with pytest.raises(ConfigError, match=r"at least network\.max_ttl \(9\)"):
            load_config(path, {"network.hard_ttl_limit": 8})

    def test_paths_may_be_given_as_path_objects(self, tmp_path: Path) -> None:
        config = load_config(overrides={"node.state_dir": tmp_path})
        assert config.node.state_dir == str(tmp_path)
        assert config.state_path == tmp_path


class TestBatching:
    def test_on_by_default_with_router_batch_size_as_its_maximum(self) -> None:
        config = load_config()
        assert config.batching.enabled
        assert config.router.batch_size == 1000

    def test_min_batch_must_not_exceed_the_largest_batch(self) -> None:
        with pytest.raises(ConfigError) as caught:
            load_config(overrides={"router.batch_size": 4})
        assert caught.value.key == "batching.min_batch"
        assert "router.batch_size (4)" in str(caught.value)
        # Off, the batch is fixed and min_batch does not matter.
        fixed = load_config(
            overrides={
                "router.batch_size": 4,
                "batching.enabled": False,
            }
        )
        assert fixed.router.batch_size == 4


class TestDumps:
    def test_the_dict_is_plain_data(self) -> None:
        tables = config_as_dict(load_config(overrides={"catcher.seeds": ["10.0.0.1:6346"]}))
        assert list(tables) == [
            "node",
            "network",
            "slow_peer",
            "router",
            "catcher",
            "log",
            "trace",
            "governor",
            "batching",
            "shedding",
            "abuse",
            "admin",
            "profiler",
            "emulation",
        ]
        assert tables["catcher"]["seeds"] == ["10.0.0.1:6346"]
        assert tables["network"]["max_ttl"] == 7

    def test_dict_round_trips_through_overrides(self, tmp_path: Path) -> None:
        config = load_config(write(tmp_path, FULL_FILE))
        assert load_config(overrides=flatten(config_as_dict(config))) == config

    def test_toml_round_trips_through_a_file(self, tmp_path: Path) -> None:
        config = load_config(write(tmp_path, FULL_FILE))
        assert load_config(write(tmp_path, config_as_toml(config), "dump.toml")) == config
        assert load_config(write(tmp_path, config_as_toml(Config()), "dump2.toml")) == Config()

    @given(st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"), min_size=1))
    def test_any_path_survives_a_toml_dump(self, state_dir: str) -> None:
        config = load_config(overrides={"node.state_dir": state_dir})
        assert tomllib.loads(config_as_toml(config))["node"]["state_dir"] == state_dir


class TestHostPort:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("127.0.0.1:6346", ("127.0.0.1", 6346)),
            ("0.0.0.0:0", ("0.0.0.0", 0)),
            ("[::1]:6346", ("::1", 6346)),
            ("[::]:0", ("::", 0)),
            ("[2001:DB8:0:0::1]:65535", ("2001:db8::1", 65535)),
            ("localhost:0", ("localhost", 0)),
            ("peer-1.example.org:6346", ("peer-1.example.org", 6346)),
        ],
    )
    def test_accepted_forms(self, text: str, expected: tuple[str, int]) -> None:
        assert parse_host_port(text, key="node.listen") == expected

    @pytest.mark.parametrize(
        ("text", "words"),
        [
            ("127.0.0.1", "missing :PORT"),
            ("localhost", "missing :PORT"),
            (":6346", "missing HOST"),
            ("127.0.0.1:", "port"),
            ("127.0.0.1:65536", "0 to 65535"),
            ("127.0.0.1:-1", "port"),
            ("127.0.0.1:+80", "port"),
            ("127.0.0.1: 80", "port"),
            ("127.0.0.1:http", "port"),
            ("::1:6346", "brackets"),
            ("[::1]6346", "IPv6"),
            ("[::1:6346", "IPv6"),
            ("[nope]:6346", "IPv6"),
            ("256.0.0.1:6346", "IPv4"),
            ("010.0.0.1:6346", "IPv4"),
            ("1.2.3:6346", "IPv4"),
            ("-bad-.example:6346", "host name"),
            ("under_score.example:6346", "host name"),
            ("a..b:6346", "host name"),
        ],
    )
    def test_refused_forms_name_the_key(self, text: str, words: str) -> None:
        with pytest.raises(ConfigError) as caught:
            parse_host_port(text, key="catcher.seeds")
        assert caught.value.key == "catcher.seeds"
        assert str(caught.value).startswith(f"catcher.seeds = {text!r}: ")
        assert words in str(caught.value)

    def test_port_zero_can_be_refused(self) -> None:
        with pytest.raises(ConfigError, match="1 to 65535"):
            parse_host_port("localhost:0", key="catcher.seeds", allow_port_zero=False)

    @given(st.ip_addresses(), st.integers(0, 65535))
    def test_any_address_and_port_round_trip(
        self, address: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int
    ) -> None:
        text = f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
        assert parse_host_port(text, key="k") == (str(address), port)


def test_the_documented_example_is_the_defaults() -> None:
    example = Path(__file__).resolve().parents[2] / "docs" / "router.example.toml"
    assert load_config(example) == load_config()


def test_the_documented_example_names_every_setting() -> None:
    """The example is where each setting is explained, so none may be missing from it."""
    import tomllib

    from gnutella_router.config.loading import TYPES

    example = Path(__file__).resolve().parents[2] / "docs" / "router.example.toml"
    documented = tomllib.loads(example.read_text(encoding="utf-8"))
    assert {name: sorted(values) for name, values in documented.items()} == {
        name: sorted(fields) for name, fields in TYPES.items()
    }


def test_the_declared_policies_are_the_implemented_ones() -> None:
    """The config's choices are declared as types; each must name a queue that exists."""
    from typing import get_args

    from gnutella_router.config.sections import SlowPeerPolicy
    from gnutella_router.net.outqueue import POLICIES

    assert get_args(SlowPeerPolicy) == POLICIES


def test_min_connections_follows_max_connections_when_not_given() -> None:
    """``--max-connections 2`` alone is a sensible node, not an error about a setting the
    operator never touched; a min_connections given explicitly is still held to the max."""
    assert load_config(overrides={"network.max_connections": 2}).catcher.min_connections == 2
    assert load_config(overrides={"network.max_connections": 64}).catcher.min_connections == 4
    with pytest.raises(ConfigError) as caught:
        load_config(overrides={"network.max_connections": 2, "catcher.min_connections": 3})
    assert caught.value.key == "catcher.min_connections"
