"""The flags that override single settings: each reaches its setting, beats the file,
and is refused like the file's value would be."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gnutella_router.cli.config_flags import add_config_arguments, config_from_args
from gnutella_router.config import Config, ConfigError
from gnutella_router.config.sections import LogConfig


def write(tmp_path: Path, text: str, name: str = "router.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def parse_flags(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    return parser.parse_args(argv)


class TestCommandLine:
    def test_no_flags_means_the_defaults(self) -> None:
        assert config_from_args(parse_flags([])) == Config()

    def test_every_flag_reaches_its_setting(self, tmp_path: Path) -> None:
        args = parse_flags(
            [
                "--listen=[::1]:0",
                "--seed=10.0.0.1:6346",
                "--seed",
                "peer.example.org:6346",
                "--max-ttl=4",
                "--slow-peer=flow-control",
                "--query-delay-ms=2.5",
                "--log-format=json",
                "--log-level=DEBUG",
                f"--state-dir={tmp_path}",
                "--min-connections=2",
                "--max-connections=8",
            ]
        )
        config = config_from_args(args)
        assert config.node.listen == "[::1]:0"
        assert config.node.state_dir == str(tmp_path)
        assert config.catcher.seeds == ("10.0.0.1:6346", "peer.example.org:6346")
        assert config.network.max_ttl == 4
        assert config.network.max_connections == 8
        assert config.catcher.min_connections == 2
        assert config.slow_peer.policy == "flow-control"
        assert config.router.query_delay_ms == 2.5
        assert config.log == LogConfig(format="json", level="debug")

    def test_flags_beat_the_file_and_seeds_add_to_it(self, tmp_path: Path) -> None:
        path = write(
            tmp_path,
            '[network]\nmax_ttl = 5\nmax_connections = 10\n[catcher]\nseeds = ["10.0.0.1:6346"]\n',
        )
        config = config_from_args(
            parse_flags(["--config", str(path), "--max-ttl", "3", "--seed", "10.0.0.2:6346"])
        )
        assert config.network.max_ttl == 3
        assert config.network.max_connections == 10
        assert config.catcher.seeds == ("10.0.0.1:6346", "10.0.0.2:6346")

    @pytest.mark.parametrize(
        ("argv", "key"),
        [
            (["--max-ttl", "99"], "network.max_ttl"),
            (["--seed", "nowhere"], "catcher.seeds"),
            (["--listen", "1.2.3.4"], "node.listen"),
        ],
    )
    def test_bad_flag_values_are_config_errors(self, argv: list[str], key: str) -> None:
        with pytest.raises(ConfigError) as caught:
            config_from_args(parse_flags(argv))
        assert caught.value.key == key

    def test_argparse_rejects_unknown_choices(self, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit):
            parse_flags(["--slow-peer", "drop"])
        assert "invalid choice" in capsys.readouterr().err

    def test_a_namespace_without_the_flags_gives_the_defaults(self) -> None:
        assert config_from_args(argparse.Namespace()) == Config()
