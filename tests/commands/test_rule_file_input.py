"""Rule files as given on the command line: odd files, encodings, limits, duplicates and keys, each
refused in one line or loaded as written."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from conftest import Sandbox
from inprocess import ERROR, cli


def _rule_file(path: Path, body: str = "    notice: look here\n", rule_id: str = "extra-notice") -> Path:
    path.write_text(f'schema: 1\nrules:\n  - id: {rule_id}\n    call: vllm.v1.request.Request\n'
                    f'    since: "0.1"\n    why: w\n{body}')
    return path


def _deep_example(tmp_path: Path, terms: int = 20_000) -> Path:
    expr = "+".join(["a"] * terms)
    return _rule_file(tmp_path / "deep.yaml", f'    notice: n\n    examples:\n      - before: "x = {expr}"\n'
                                             f'        after: "x = 1"\n')


def test_a_20000_term_rule_example_is_one_line(tmp_path: Path) -> None:
    rules = _deep_example(tmp_path)
    code, _, err = cli("rules", "check", str(rules))
    assert code == 2
    assert err == (f"{ERROR}{rules}:9: rule 'extra-notice': 'before' is nested too deeply for Python's parser: "
                   "an example is a short hand-written snippet\n")


@pytest.mark.slow
def test_a_20000_term_rule_example_stops_apply_before_anything_is_recorded(sandbox: Sandbox, tmp_path: Path) -> None:
    rules = _deep_example(tmp_path)
    before = sandbox.snapshot()
    r = sandbox.run("--rules", str(rules), "--vllm-version", "0.16")
    assert r.returncode == 2
    assert r.stderr.endswith("'before' is nested too deeply for Python's parser: an example is a short "
                             "hand-written snippet\n")
    assert "Traceback" not in r.stderr
    assert not sandbox.state.exists()
    assert sandbox.snapshot() == before


def test_a_fifo_in_a_rules_folder_is_refused_not_waited_on(tmp_path: Path) -> None:
    folder = tmp_path / "rules"
    folder.mkdir()
    _rule_file(folder / "a.yaml")
    os.mkfifo(folder / "b.yaml")
    result: list[tuple[int, str, str]] = []
    worker = threading.Thread(target=lambda: result.append(cli("--rules", str(folder), "rules", "list")),
                              daemon=True)
    worker.start()
    worker.join(30)
    assert result, "the loader waited on the FIFO"
    code, out, err = result[0]
    assert (code, out) == (2, "")
    assert err == f"{ERROR}{folder}/b.yaml: not a regular file (a FIFO): a rule file is plain text\n"


def test_the_same_rule_file_given_twice_is_loaded_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rules = _rule_file(tmp_path / "a.yaml")
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("--rules", "a.yaml", "--rules", f"{tmp_path}/../{tmp_path.name}/a.yaml",
                          "--rules", str(tmp_path), "--json", "rules", "list")
    assert code == 0, err
    ids = [r["id"] for r in json.loads(out)]
    assert ids.count("extra-notice") == 1
    assert rules.exists()


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda text: "\ufeff" + text, id="bom"),
        pytest.param(lambda text: text.replace("\n", "\r\n"), id="crlf"),
    ],
)
def test_a_rule_file_with_a_bom_or_crlf_loads(tmp_path: Path, mangle: object) -> None:
    rules = _rule_file(tmp_path / "a.yaml")
    rules.write_bytes(mangle(rules.read_text()).encode())  # type: ignore[operator]
    code, out, err = cli("--rules", str(rules), "--json", "rules", "list")
    assert code == 0, err
    assert "extra-notice" in [r["id"] for r in json.loads(out)]


def test_a_rule_file_indented_with_tabs_is_one_line(tmp_path: Path) -> None:
    rules = _rule_file(tmp_path / "a.yaml")
    rules.write_text(rules.read_text().replace("\n  - id", "\n\t- id"))
    assert cli("--rules", str(rules), "rules", "list") == (
        2, "", f"{ERROR}{rules}:3: YAML syntax error: found character '\\t' that cannot start any token\n")


def test_rule_paths_that_are_no_files(tmp_path: Path) -> None:
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    assert cli("--rules", str(loop), "rules", "list") == (
        2, "", f"{ERROR}{loop}: a symbolic link to nothing (or a loop of links)\n")
    folder = tmp_path / "rules"
    (folder / "nested.yaml").mkdir(parents=True)
    assert cli("--rules", str(folder), "rules", "list") == (
        2, "", f"{ERROR}{folder}/nested.yaml: not a regular file (a folder): a rule file is plain text\n")
    assert cli("--rules", "/dev/null", "rules", "list") == (
        2, "", f"{ERROR}/dev/null: not a regular file (a device or socket): a rule file is plain text\n")
    (folder / "nested.yaml").rmdir()
    (folder / "gone.yaml").symlink_to(tmp_path / "nowhere.yaml")
    assert cli("--rules", str(folder), "rules", "list") == (
        2, "", f"{ERROR}{folder}/gone.yaml: cannot read: No such file or directory\n")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param("    add:\n      x: " + "+".join(["a"] * 20_000) + "\n", "'add' 'x': {v!r} is not a single Python "
                     "expression", id="add-value"),
        pytest.param('    signature: "(a=' + "+".join(["a"] * 20_000) + ')"\n    drop: [a]\n',
                     "'signature' {s!r} is not a parameter list like (a, b, c=None)", id="signature"),
    ],
)
def test_a_20000_term_operation_value_is_one_line(tmp_path: Path, body: str, message: str) -> None:
    rules = _rule_file(tmp_path / "a.yaml", body)
    code, out, err = cli("rules", "check", str(rules))
    assert (code, out) == (2, "")
    value = "+".join(["a"] * 20_000)
    assert err.startswith(f"{ERROR}{rules}:")
    shown = f"(a={value})"[:77] + "..."  # a long value is cut, the line stays readable
    assert err.endswith(message.format(v=value, s=shown) + "\n")
    assert err.count("\n") == 1


def test_a_rule_example_too_deep_for_libcst_fails_its_test_in_one_line(tmp_path: Path) -> None:
    expr = "+".join(["a"] * 900)  # Python's parser takes it; libcst's visitors do not
    rules = _rule_file(tmp_path / "a.yaml", f'    drop: [eos_token_id]\n    examples:\n      - before: "from '
                       f'vllm.v1.request import Request\\nRequest(eos_token_id={expr})"\n        after: "from '
                       f'vllm.v1.request import Request\\nRequest()"\n', rule_id="deep")
    code, out, err = cli("rules", "test", str(rules))
    assert (code, err) == (1, "")
    assert f"FAIL deep-example-1 ({rules}): skipped: nested too deeply to rewrite (a generated expression?): its " \
           "calls were not checked" in out.splitlines()
    assert out.splitlines()[-1] == "1 example ok, 1 failing"


def test_an_empty_package_key_is_one_line(tmp_path: Path) -> None:
    rules = tmp_path / "a.yaml"
    rules.write_text('schema: 1\npackage: ""\nrules:\n  - id: x\n    call: vllm.a.B\n    since: "0.1"\n'
                     "    why: w\n    notice: n\n")
    assert cli("rules", "check", str(rules)) == (2, "", f"{ERROR}{rules}:2: 'package' must name a distribution\n")


def test_a_rule_file_for_another_package_admits_it(tmp_path: Path) -> None:
    from vllm_shim_patch.rules.loader import load_pack

    rules = tmp_path / "a.yaml"
    rules.write_text('schema: 1\npackage: My_Plugin\nrules:\n  - id: x\n    call: vllm.a.B\n    since: "0.1"\n'
                     "    why: w\n    notice: n\n")
    pack = load_pack([rules])
    assert pack.packages == ("speculators", "My_Plugin")
    assert pack.targets("my-plugin") and pack.targets("Speculators") and not pack.targets("pip")

