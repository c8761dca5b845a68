"""Which release a server's command starts, read from the install (`world/install.py`): real fake installs under
tmp_path (a venv with dist-info folders, a node project with node_modules, `.bin` links, a pipx-style link), and
the exact (package, version) that `identify` and `version_of` read for the commands a world file gives: absolute
and relative programs, `python -m`, a venv's console script, `node .../node_modules/pkg/dist/index.js`, a folder
or a missing script, arguments that are not paths. Written for `make mutants`; no server is started."""

from __future__ import annotations

import json
import locale
import os
from pathlib import Path
from typing import Iterator

import pytest

from aft_bench.world.install import _dists, _node_package, _paths, _scripts, _site_packages, _top_level, identify, \
    version_of

GIT = "mcp-server-git"  # the distribution's own spelling; its module is mcp_server_git
GIT_VERSION = "2025.1.14"


def executable(path: Path, text: str = "#!/bin/sh\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def dist(site: Path, folder: str, metadata: bytes | str | None, *, entry_points: bytes | str | None = None,
         top_level: str | None = None, record: str | None = None) -> Path:
    """A `<folder>.dist-info` with the files given (None: the file is absent)."""
    info = site / f"{folder}.dist-info"
    info.mkdir(parents=True)
    for name, body in (("METADATA", metadata), ("entry_points.txt", entry_points), ("top_level.txt", top_level),
                       ("RECORD", record)):
        if body is not None:
            (info / name).write_bytes(body.encode() if isinstance(body, str) else body)
    return info


def meta(name: str, version: str) -> str:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: a server\n\nThe long description.\n"


@pytest.fixture()
def venv(tmp_path: Path) -> Path:
    """A venv as `python -m venv` leaves it: pyvenv.cfg, bin/python, the server's console script, and beside the
    server a tooling distribution (anyio: no scripts, no top_level.txt, no RECORD) that sorts before it."""
    root = tmp_path / "venv"
    executable(root / "bin" / "python")
    executable(root / "bin" / GIT)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.7\n")
    site = root / "lib" / "python3.11" / "site-packages"
    dist(site, "anyio-4.4.0", meta("anyio", "4.4.0"))
    dist(site, "mcp_server_git-2025.1.14", meta(GIT, GIT_VERSION),
         entry_points="[console_scripts]\nmcp-server-git = mcp_server_git:main\n")
    dist(site, "acme_mcp-1.2.0", meta("acme-mcp", "1.2.0"), top_level="acme_server\n")
    dist(site, "rec_mcp-0.3.0", meta("rec-mcp", "0.3.0"),
         record="rec_server/__init__.py,sha256=AbC-_1,120\nrec_server/__main__.py,sha256=dEf,80\n"
                "rec_mcp-0.3.0.dist-info/METADATA,sha256=x,300\n../../../bin/rec-server,sha256=y,200\n")
    return root


@pytest.fixture()
def sysbin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH holding only a plain `node` and `python3` (outside any venv or node_modules)."""
    bin_ = tmp_path / "sysbin"
    executable(bin_ / "node")
    executable(bin_ / "python3")
    monkeypatch.setenv("PATH", str(bin_))
    return bin_


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """A node project whose node_modules holds a scoped server (its dist/ has the usual {"type": "module"}
    package.json with no name), a `.bin` link to that server's extensionless CLI, and the project's own
    package.json above node_modules."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "package.json").write_text(json.dumps({"name": "my-notes", "version": "1.0.0", "private": True}))
    pkg = proj / "node_modules" / "@acme" / "server-x"
    (pkg / "dist").mkdir(parents=True)
    (pkg / "package.json").write_text(json.dumps({"name": "@acme/server-x", "version": "0.6.2",
                                                  "bin": {"server-x": "bin/cli"}}))
    (pkg / "dist" / "package.json").write_text(json.dumps({"type": "module"}))
    (pkg / "dist" / "index.js").write_text("console.log('hi')\n")
    executable(pkg / "bin" / "cli", "#!/usr/bin/env node\n")
    (proj / "node_modules" / ".bin").mkdir()
    (proj / "node_modules" / ".bin" / "server-x").symlink_to("../@acme/server-x/bin/cli")
    return proj


@pytest.fixture()
def ascii_locale() -> Iterator[None]:
    """The process's text encoding made ASCII, as under LANG=C where Python does not coerce it to UTF-8 (what
    `open` would use without an explicit encoding); restored after."""
    old = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    if locale.getpreferredencoding(False).lower() in ("utf-8", "utf8"):  # pragma: no cover - UTF-8 mode
        locale.setlocale(locale.LC_CTYPE, old)
        pytest.skip("this interpreter reads text as UTF-8 whatever the locale")
    yield
    locale.setlocale(locale.LC_CTYPE, old)


def site_of(venv: Path) -> Path:
    return venv / "lib" / "python3.11" / "site-packages"


# --- the helpers ------------------------------------------------------------------------------------------------

def test_dists_reads_only_the_headers_of_each_dist_info(tmp_path: Path) -> None:
    """A dist-info would be skipped, or credited a version from its description, or crash on a byte that is not
    UTF-8, if METADATA's headers were read otherwise than `Name: `/`Version: ` up to the first blank line."""
    site = tmp_path / "site-packages"
    good = dist(site, "alpha-1.0", b"Metadata-Version: 2.1\nName: alpha\nVersion: 1.0.3 \nAuthor: Jos\xe9\n\n"
                                   b"Version: 9.9 (from the description)\n")
    dist(site, "beta-2.0", None)  # no METADATA (a half-removed install), sorted before later ones
    dist(site, "lower-1.0", "metadata-version: 2.1\nname: lower\nversion: 1.0\n")
    dist(site, "late-1.0", "Metadata-Version: 2.1\nName: late\n\nVersion: 1.0\n")
    dist(site, "noversion-1.0", "Metadata-Version: 2.1\nName: noversion\nSummary: s\n")
    dist(site, "noname-1.0", "Metadata-Version: 2.1\nVersion: 1.0\n")
    zeta = dist(site, "zeta-3.1", meta("Zeta.Server", "3.1"))
    (site / "eggy-1.0.egg-info").mkdir()
    (site / "eggy-1.0.egg-info" / "METADATA").write_text(meta("eggy", "1.0"))
    assert _dists(site) == [("alpha", "1.0.3", good), ("Zeta.Server", "3.1", zeta)]
    assert _dists(tmp_path / "nowhere") == []


def test_site_packages_only_of_a_venv(tmp_path: Path, venv: Path) -> None:
    """A system interpreter (no pyvenv.cfg beside its bin/) would be read as a venv, or a venv's site-packages
    missed."""
    (venv / "lib" / "python3.12" / "site-packages").mkdir(parents=True)
    (venv / "lib" / "python3.12" / "not-site").mkdir()
    assert _site_packages(venv / "bin" / "python") == [site_of(venv), venv / "lib" / "python3.12" / "site-packages"]
    system = tmp_path / "usr"
    executable(system / "bin" / "python3")
    (system / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    assert _site_packages(system / "bin" / "python3") == []


def test_scripts_reads_console_scripts_only(tmp_path: Path) -> None:
    """A server's console script would not be found (or another section's names taken for scripts, or a
    non-UTF-8 comment crash the read) and its command not identified."""
    both = dist(tmp_path, "a-1", meta("a", "1"), entry_points=b"# by Jos\xe9\n[console_scripts]\nmcp-a = a:main\n"
                                                              b"a-admin = a.admin:run\n\n[mcp.plugins]\nfs = a.fs\n")
    other = dist(tmp_path, "b-1", meta("b", "1"), entry_points="[pytest11]\nb = b.plugin\n")
    bad = dist(tmp_path, "c-1", meta("c", "1"), entry_points="c = c:main\n")  # no section header
    none = dist(tmp_path, "d-1", meta("d", "1"))
    assert _scripts(both) == {"mcp-a", "a-admin"}
    assert _scripts(other) == set()
    assert _scripts(bad) == set()
    assert _scripts(none) == set()


def test_top_level_from_top_level_txt_else_record(tmp_path: Path, venv: Path) -> None:
    """`python -m MODULE` would be credited to a distribution that does not install MODULE, or missed for one
    that does (top_level.txt, else the first folder of each RECORD line)."""
    site = site_of(venv)
    acme, rec = site / "acme_mcp-1.2.0.dist-info", site / "rec_mcp-0.3.0.dist-info"
    anyio = site / "anyio-4.4.0.dist-info"
    assert _top_level(acme, "acme_server") is True
    assert _top_level(acme, "acme") is False
    assert _top_level(rec, "rec_server") is True
    assert _top_level(rec, "__init__.py") is False
    assert _top_level(rec, "sha256=AbC-_1") is False
    assert _top_level(anyio, "anyio") is False  # neither file: nothing is known
    both = dist(tmp_path, "both-1", meta("both", "1"), top_level="both_pkg\n", record="other_pkg/__init__.py,,\n")
    assert _top_level(both, "both_pkg") is True
    assert _top_level(both, "other_pkg") is False  # top_level.txt is the answer where it exists


def test_node_package_nearest_named_one_stopping_at_node_modules(project: Path) -> None:
    """A server's script would be credited to the project that depends on it (or to nothing) if the walk up
    did not take the nearest package.json with a name and version and stop at node_modules."""
    pkg = project / "node_modules" / "@acme" / "server-x"
    assert _node_package(pkg / "dist" / "index.js") == ("@acme/server-x", "0.6.2")
    assert _node_package(pkg / "dist" / "index.js", "@acme/server-x") == ("@acme/server-x", "0.6.2")
    assert _node_package(pkg / "dist" / "index.js", "my-notes") is None
    assert _node_package(pkg) == ("@acme/server-x", "0.6.2")  # a folder: its own package.json first
    assert _node_package(project / "node_modules" / ".bin" / "server-x") == ("@acme/server-x", "0.6.2")
    assert _node_package(project / "src" / "main.js") == ("my-notes", "1.0.0")  # a folder that is not node_modules


def test_paths_are_existing_script_like_arguments(tmp_path: Path, project: Path) -> None:
    """A command's script argument would be missed, or an option, a bare word or a data file taken for it."""
    script = project / "node_modules" / "@acme" / "server-x" / "dist" / "index.js"
    (project / "notes.db").write_text("")
    argv = ["node", "--max-old-space-size=512", "--require=/x/y.js", str(script), "stdio", str(project / "notes.db"),
            "node_modules/@acme/server-x/dist/index.js", str(project / "gone.js"), str(project)]
    assert _paths(argv, project) == [script, script, project]
    assert _paths([str(script)], None) == []  # the program itself is not an argument


# --- version_of: Python installs --------------------------------------------------------------------------------

def test_version_of_a_venv_interpreter_with_dash_m(venv: Path) -> None:
    """The pinned version check would read nothing (or another distribution's version) for `python -m` in a
    venv; names compare as pip does (case, '-', '_', '.')."""
    argv = [str(venv / "bin" / "python"), "-m", "mcp_server_git"]
    assert version_of("mcp_server_git", argv) == GIT_VERSION
    assert version_of("MCP.Server-Git", argv) == GIT_VERSION
    assert version_of("anyio", argv) == "4.4.0"
    assert version_of("mcp-server-fetch", argv) is None


def test_version_of_a_console_script_absolute_relative_and_on_path(tmp_path: Path, venv: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A world's program given as an absolute path, a path relative to its cwd, or a name on PATH would not
    be found, and the pin not checked."""
    assert version_of(GIT, [str(venv / "bin" / GIT)]) == GIT_VERSION
    assert version_of(GIT, ["venv/bin/mcp-server-git"], cwd=tmp_path) == GIT_VERSION
    assert version_of(GIT, ["./venv/bin/mcp-server-git", "--repository", "."], cwd=tmp_path) == GIT_VERSION
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert version_of(GIT, ["venv/bin/mcp-server-git"], cwd=elsewhere) is None
    monkeypatch.chdir(tmp_path)  # without a cwd, relative to the current folder
    assert version_of(GIT, ["venv/bin/mcp-server-git"]) == GIT_VERSION
    monkeypatch.setenv("PATH", f"{tmp_path / 'empty'}{os.pathsep}{venv / 'bin'}")
    assert version_of(GIT, [GIT, "--repository", "/r"]) == GIT_VERSION
    assert version_of(GIT, ["mcp-server-gone"]) is None


def test_version_of_a_file_that_is_not_executable_given_by_path(venv: Path) -> None:
    """A program named by its path is looked at there, executable bit or not (PATH lookup is only for bare
    names)."""
    (venv / "bin" / GIT).chmod(0o644)
    assert version_of(GIT, [str(venv / "bin" / GIT)]) == GIT_VERSION


def test_version_of_reads_nothing_for_a_missing_program_or_no_venv(tmp_path: Path, venv: Path, sysbin: Path) -> None:
    """A stale world naming a program that is gone (or a folder that is not a venv) would be credited a
    version from the files beside it."""
    assert version_of(GIT, [str(venv / "bin" / "mcp-server-gone")]) is None
    assert version_of(GIT, ["not-on-path"]) is None
    assert version_of(GIT, []) is None
    (venv / "pyvenv.cfg").unlink()
    assert version_of(GIT, [str(venv / "bin" / GIT)]) is None


def test_version_of_a_pipx_style_link_into_a_venv(tmp_path: Path, venv: Path) -> None:
    """A program linked from ~/.local/bin into its own venv (pipx, uv tool) would read no version."""
    link = tmp_path / "home" / ".local" / "bin" / GIT
    link.parent.mkdir(parents=True)
    link.symlink_to(venv / "bin" / GIT)
    assert version_of(GIT, [str(link)]) == GIT_VERSION
    assert version_of("anyio", [str(link)]) == "4.4.0"
    assert version_of("mcp-server-fetch", [str(link)]) is None


def test_version_of_an_argument_that_cannot_be_a_path(venv: Path, sysbin: Path) -> None:
    """A command argument too long to be a file name, or holding a NUL, would crash reading the install."""
    long = "x" * 300
    assert version_of(GIT, [f"/{long}/{GIT}"]) is None
    assert version_of(GIT, ["node", f"/{long}/index.js", "--x", f"{long}/a.js"], cwd=venv) is None
    assert version_of(GIT, ["node", "/tmp/a\0b/index.js"]) is None
    assert version_of(GIT, [str(venv / "bin" / GIT), f"/{long}/x.js"]) == GIT_VERSION


# --- version_of and identify: node installs ---------------------------------------------------------------------

def test_node_script_argument_absolute_and_relative(project: Path, sysbin: Path) -> None:
    """`node .../node_modules/pkg/dist/index.js` would read no version, another package's, or the project's."""
    script = project / "node_modules" / "@acme" / "server-x" / "dist" / "index.js"
    rel = "node_modules/@acme/server-x/dist/index.js"
    assert version_of("@acme/server-x", ["node", str(script)]) == "0.6.2"
    assert version_of("@acme/server-x", ["node", rel], cwd=project) == "0.6.2"
    assert version_of("my-notes", ["node", str(script)]) is None  # the project is not the server
    assert version_of("@acme/other", ["node", str(script)]) is None
    assert identify(["node", str(script)]) == ("@acme/server-x", "0.6.2")
    assert identify(["node", rel], cwd=project) == ("@acme/server-x", "0.6.2")
    assert identify(["node", rel], cwd=project / "node_modules") is None


def test_node_script_relative_without_cwd_is_from_the_current_folder(project: Path, sysbin: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative script with no cwd given would crash or be looked for elsewhere than the current folder."""
    monkeypatch.chdir(project)
    rel = "node_modules/@acme/server-x/dist/index.js"
    assert version_of("@acme/server-x", ["node", rel]) == "0.6.2"
    assert identify(["node", rel]) == ("@acme/server-x", "0.6.2")
    assert identify(["node_modules/.bin/server-x"]) == ("@acme/server-x", "0.6.2")


def test_npx_style_bin_link_in_node_modules(project: Path) -> None:
    """A node_modules/.bin link (what npx runs) to an extensionless CLI would read nothing."""
    link = project / "node_modules" / ".bin" / "server-x"
    assert version_of("@acme/server-x", [str(link), "stdio"]) == "0.6.2"
    assert version_of("my-notes", [str(link)]) is None
    assert identify([str(link), "stdio"]) == ("@acme/server-x", "0.6.2")
    assert identify(["node_modules/.bin/server-x"], cwd=project) == ("@acme/server-x", "0.6.2")


@pytest.mark.parametrize("suffix", [".js", ".mjs", ".cjs"])
def test_a_node_script_as_the_program_outside_node_modules(tmp_path: Path, suffix: str) -> None:
    """A server run as its own script (a shebang `.js`/`.mjs`/`.cjs` in a folder that is not node_modules) would
    read no version."""
    (tmp_path / "srv").mkdir()
    (tmp_path / "srv" / "package.json").write_text(json.dumps({"name": "my-server", "version": "1.0.0"}))
    script = executable(tmp_path / "srv" / f"server{suffix}", "#!/usr/bin/env node\n")
    assert version_of("my-server", [str(script)]) == "1.0.0"
    assert version_of("other", [str(script)]) is None
    assert identify([str(script)]) == ("my-server", "1.0.0")


@pytest.mark.parametrize("suffix", [".ts", ""])
def test_a_program_that_is_no_node_script_is_not_credited_to_a_package_json_above(tmp_path: Path,
                                                                                   suffix: str) -> None:
    """A native binary (or a `.ts` program) beside a project's package.json would be taken for that package."""
    (tmp_path / "srv").mkdir()
    (tmp_path / "srv" / "package.json").write_text(json.dumps({"name": "my-server", "version": "1.0.0"}))
    program = executable(tmp_path / "srv" / "tools" / f"server{suffix}")
    assert version_of("my-server", [str(program)]) is None
    assert identify([str(program)]) is None


@pytest.mark.parametrize("name", ["dist/index.js", "dist/index.mjs", "dist/index.cjs", "src/index.ts",
                                  "server.py", "bin/cli", ""])
def test_each_script_kind_as_an_argument(project: Path, sysbin: Path, name: str) -> None:
    """A script of each kind (or the package folder itself) given to node/tsx/python would read no version."""
    pkg = project / "node_modules" / "@acme" / "server-x"
    target = pkg / name if name else pkg
    if name:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()
    argv = ["node", "--import=tsx", str(target), "--stdio"]
    assert version_of("@acme/server-x", argv) == "0.6.2"
    assert identify(argv) == ("@acme/server-x", "0.6.2")


def test_arguments_that_are_not_the_server_script(project: Path, sysbin: Path) -> None:
    """A data file, a served folder ('.'), or a script that is gone would be taken for the server, so the
    project's own package.json would be read as the server's release."""
    (project / "notes.db").write_text("")
    (project / "data.json").write_text("{}")
    assert identify(["node", str(project / "notes.db")]) is None
    assert identify(["node", str(project / "data.json")]) is None
    assert identify(["node", "-y", "@acme/server-x", "."], cwd=project) is None
    assert identify(["node", str(project / "node_modules" / "@acme" / "server-x" / "dist" / "gone.js")]) is None
    assert version_of("@acme/server-x",
                      ["node", str(project / "node_modules" / "@acme" / "server-x" / "dist" / "gone.js")]) is None
    assert version_of("my-notes", ["node", str(project / "notes.db")]) is None


def test_a_package_in_node_modules_without_its_own_package_json(project: Path, sysbin: Path) -> None:
    """A package folder with no (or a broken) package.json would be credited to the project above node_modules."""
    ghost = project / "node_modules" / "ghost"
    (ghost / "lib").mkdir(parents=True)
    (ghost / "lib" / "index.js").write_text("")
    assert identify(["node", str(ghost / "lib" / "index.js")]) is None
    assert version_of("my-notes", ["node", str(ghost / "lib" / "index.js")]) is None
    (ghost / "package.json").write_text("{not json")
    assert identify(["node", str(ghost / "lib" / "index.js")]) is None


def test_a_broken_package_json_nearer_is_skipped(project: Path, sysbin: Path) -> None:
    """A build folder's unreadable package.json would hide the package's own one above it."""
    pkg = project / "node_modules" / "@acme" / "server-x"
    (pkg / "dist" / "package.json").write_text("{\"type\": \"module\",")
    assert identify(["node", str(pkg / "dist" / "index.js")]) == ("@acme/server-x", "0.6.2")
    assert version_of("@acme/server-x", ["node", str(pkg / "dist" / "index.js")]) == "0.6.2"


def test_a_package_json_without_a_string_version_or_name(project: Path, sysbin: Path) -> None:
    """A package.json naming no version (or a numeric one) would be read as the server's release."""
    pkg = project / "node_modules" / "half"
    (pkg / "dist").mkdir(parents=True)
    (pkg / "dist" / "index.js").write_text("")
    (pkg / "package.json").write_text(json.dumps({"name": "half"}))
    argv = ["node", str(pkg / "dist" / "index.js")]
    assert identify(argv) is None
    assert version_of("half", argv) is None
    (pkg / "package.json").write_text(json.dumps({"name": "half", "version": 2}))
    assert identify(argv) is None
    (pkg / "package.json").write_text(json.dumps({"name": ["half"], "version": "2.0.0"}))
    assert identify(argv) is None
    assert version_of("half", argv) is None


# --- identify: Python installs ----------------------------------------------------------------------------------

def test_identify_a_venv_console_script(tmp_path: Path, venv: Path) -> None:
    """init-world would draft the wrong package (the first distribution in the venv) or none for a console
    script."""
    assert identify([str(venv / "bin" / GIT), "--repository", "/r"]) == (GIT, GIT_VERSION)
    assert identify(["venv/bin/mcp-server-git"], cwd=tmp_path) == (GIT, GIT_VERSION)
    executable(venv / "bin" / "other-tool")
    assert identify([str(venv / "bin" / "other-tool")]) is None


def test_identify_a_venv_interpreter_with_dash_m(venv: Path) -> None:
    """`python -m MODULE` would be drafted as another distribution of the venv (anyio sorts first) or none:
    by the distribution's name, its top_level.txt, or its RECORD; a dotted module counts by its top package."""
    py = str(venv / "bin" / "python")
    assert identify([py, "-m", "mcp_server_git"]) == (GIT, GIT_VERSION)
    assert identify([py, "-u", "-m", "mcp_server_git.server", "--repository", "/r"]) == (GIT, GIT_VERSION)
    assert identify([py, "-m", "acme_server"]) == ("acme-mcp", "1.2.0")
    assert identify([py, "-m", "rec_server.__main__"]) == ("rec-mcp", "0.3.0")
    assert identify([py, "-m", "server"]) is None  # no distribution installs it
    assert identify([py, "-m"]) is None  # nothing after -m
    assert identify([py, "-c", "print(1)"]) is None


def test_identify_nothing_for_an_empty_or_unknown_command(sysbin: Path, venv: Path) -> None:
    """An empty command, or a program not on PATH, would crash init-world."""
    assert identify([]) is None
    assert identify(["not-on-path", "-m", "mcp_server_git"]) is None
    assert identify([str(venv / "bin" / "mcp-server-gone")]) is None
    assert identify(["node", "/tmp/a\0b/index.js"]) is None
    assert identify(["node", "/" + "x" * 300 + "/index.js"]) is None



def test_install_files_are_read_as_utf8_whatever_the_locale(venv: Path, project: Path, sysbin: Path,
                                                            ascii_locale: None) -> None:
    """Under a non-UTF-8 locale, a package.json with a non-ASCII author would lose the server's version, and a
    RECORD listing a non-ASCII file name would crash `python -m` identification (both files are UTF-8)."""
    pkg = project / "node_modules" / "@acme" / "server-x"
    (pkg / "package.json").write_text(json.dumps({"name": "@acme/server-x", "version": "0.6.2",
                                                  "author": "Jos\u00e9 M\u00fcller \u2014 acme"},
                                                 ensure_ascii=False), encoding="utf-8")
    assert identify(["node", str(pkg / "dist" / "index.js")]) == ("@acme/server-x", "0.6.2")
    assert version_of("@acme/server-x", ["node", str(pkg / "dist" / "index.js")]) == "0.6.2"
    record = site_of(venv) / "rec_mcp-0.3.0.dist-info" / "RECORD"
    record.write_text("rec_server/__init__.py,sha256=AbC,120\nrec_server/locale/fran\u00e7ais.json,sha256=x,9\n",
                      encoding="utf-8")
    (site_of(venv) / "acme_mcp-1.2.0.dist-info" / "METADATA").write_text(
        meta("acme-mcp", "1.2.0").replace("Summary: a server", "Summary: \u00e9t\u00e9 server"), encoding="utf-8")
    py = str(venv / "bin" / "python")
    assert identify([py, "-m", "rec_server"]) == ("rec-mcp", "0.3.0")
    assert identify([py, "-m", "acme_server"]) == ("acme-mcp", "1.2.0")


# --- what the first measurement of this module found (each was wrong before) ---------------------------------------

def test_identify_a_pipx_style_link_into_a_venv(tmp_path: Path, venv: Path) -> None:
    """init-world would draft no package for a server installed with pipx or uv tool (version_of read it)."""
    link = tmp_path / "home" / ".local" / "bin" / GIT
    link.parent.mkdir(parents=True)
    link.symlink_to(venv / "bin" / GIT)
    assert identify([str(link), "--repository", "/r"]) == (GIT, GIT_VERSION)
    other = tmp_path / "home" / ".local" / "bin" / "git-mcp"  # a link under another name: the target's name counts
    other.symlink_to(venv / "bin" / GIT)
    assert identify([str(other)]) == (GIT, GIT_VERSION)


def test_identify_a_console_script_with_capitals(tmp_path: Path, venv: Path) -> None:
    """A console script named with capitals (entry_points keeps them) would never be matched to its distribution."""
    site = venv / "lib" / "python3.11" / "site-packages"
    dist(site, "caps_mcp-2.0", meta("caps-mcp", "2.0"), entry_points="[console_scripts]\nMCP-Caps = caps:main\n")
    executable(venv / "bin" / "MCP-Caps")
    executable(venv / "bin" / "mcp-caps")
    assert identify([str(venv / "bin" / "MCP-Caps")]) == ("caps-mcp", "2.0")
    assert identify([str(venv / "bin" / "mcp-caps")]) is None  # the script it installs is MCP-Caps, not mcp-caps
    assert _scripts(site / "caps_mcp-2.0.dist-info") == {"MCP-Caps"}


def test_identify_a_single_module_distribution_from_its_record(venv: Path) -> None:
    """`python -m solo` of a distribution that installs one module file (RECORD `solo.py`) would be drafted as none."""
    site = venv / "lib" / "python3.11" / "site-packages"
    dist(site, "solo_server-0.9", meta("solo-server", "0.9"),
         record=",sha256=odd,0\nsolo.py,sha256=q,10\nsolo_server-0.9.dist-info/METADATA,sha256=m,5\n")
    py = str(venv / "bin" / "python")
    assert identify([py, "-m", "solo"]) == ("solo-server", "0.9")
    assert identify([py, "-m", "sol"]) is None
    assert _top_level(site / "solo_server-0.9.dist-info", "solo") is True


def test_a_launcher_is_never_the_server_it_starts(tmp_path: Path, sysbin: Path) -> None:
    """`npx -y @scope/server` would be drafted as npm (npx's own package.json), and its pin then check npm's version."""
    npm = tmp_path / "lib" / "node_modules" / "npm"
    (npm / "bin").mkdir(parents=True)
    (npm / "package.json").write_text(json.dumps({"name": "npm", "version": "11.19.1"}))
    executable(npm / "bin" / "npx-cli.js", "#!/usr/bin/env node\n")
    (sysbin / "npx").symlink_to(npm / "bin" / "npx-cli.js")
    assert identify(["npx", "-y", "@modelcontextprotocol/server-filesystem", str(tmp_path)]) is None
    pnpm = tmp_path / "lib" / "node_modules" / "pnpm"
    (pnpm / "bin").mkdir(parents=True)
    (pnpm / "package.json").write_text(json.dumps({"name": "pnpm", "version": "9.0.0"}))
    executable(pnpm / "bin" / "pnpm.cjs", "#!/usr/bin/env node\n")
    assert identify([str(pnpm / "bin" / "pnpm.cjs"), "dlx", "some-server"]) is None
    tool = tmp_path / "lib" / "node_modules" / "npm-run-all"  # a package merely named like one is credited
    (tool / "bin").mkdir(parents=True)
    (tool / "package.json").write_text(json.dumps({"name": "npm-run-all", "version": "4.1.5"}))
    executable(tool / "bin" / "run.js", "#!/usr/bin/env node\n")
    assert identify([str(tool / "bin" / "run.js")]) == ("npm-run-all", "4.1.5")


def test_non_ascii_names_are_read_as_utf8_whatever_the_locale(tmp_path: Path, ascii_locale: None) -> None:
    """A distribution, console script or module named in non-ASCII (`café`, a valid identifier) would be missed, or
    crash `init-world`, where the locale's encoding is ASCII."""
    root = tmp_path / "v"
    executable(root / "bin" / "python")
    executable(root / "bin" / "café-server")
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    site = root / "lib" / "python3.11" / "site-packages"
    dist(site, "cafe_mcp-1.0", meta("café-mcp", "1.0"), entry_points="[console_scripts]\ncafé-server = café:main\n",
         top_level="café\n")
    dist(site, "thé_mcp-2.0", meta("thé-mcp", "2.0"), record="thé/__init__.py,sha256=a,1\n")
    assert _dists(site)[0][:2] == ("café-mcp", "1.0")
    assert _scripts(site / "cafe_mcp-1.0.dist-info") == {"café-server"}
    assert identify([str(root / "bin" / "café-server")]) == ("café-mcp", "1.0")
    assert identify([str(root / "bin" / "python"), "-m", "café"]) == ("café-mcp", "1.0")
    assert identify([str(root / "bin" / "python"), "-m", "thé"]) == ("thé-mcp", "2.0")
    assert version_of("café-mcp", [str(root / "bin" / "python")]) == "1.0"
