"""The package's build backend: maturin's, with one step before the wheel is made. The wheel
ships memscope's command-line tool as well as the recorder, the way ruff and uv ship theirs:
`cargo build --release --bin memscope` in the repository (the same `target/` as a `cargo
build` there, so after one it relinks nothing), the binary copied into the wheel's `scripts`
(`memscope_torch.data/scripts/`, maturin's `data` directory), which pip installs on PATH beside
`python`. Everything else is maturin's own hook."""

import os
import shutil
import subprocess
from pathlib import Path

import maturin

HERE = Path(__file__).resolve().parent.parent  # python/
ROOT = HERE.parent                             # the repository
SCRIPTS = HERE / "memscope_torch.data" / "scripts"
# maturin reads the data directory for every hook (the metadata's too): it must exist.
SCRIPTS.mkdir(parents=True, exist_ok=True)


def _cli():
    """Builds the `memscope` binary and puts it where the wheel's scripts come from."""
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    cmd = [cargo, "build", "--release", "--bin", "memscope", "--manifest-path",
           str(ROOT / "Cargo.toml")]
    try:
        subprocess.run(cmd, check=True)
    except FileNotFoundError:
        raise SystemExit("building memscope's command-line tool needs cargo (the Rust toolchain: "
                         "https://rustup.rs), which was not found on PATH") from None
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    binary = target / "release" / "memscope"
    SCRIPTS.mkdir(parents=True, exist_ok=True)
    dest = SCRIPTS / "memscope"
    tmp = dest.with_suffix(".tmp")
    shutil.copy2(binary, tmp)
    os.chmod(tmp, 0o755)
    os.replace(tmp, dest)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _cli()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _cli()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)


def __getattr__(name):
    # get_requires_for_build_*, prepare_metadata_for_build_*, build_sdist: maturin's.
    return getattr(maturin, name)
