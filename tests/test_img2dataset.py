"""What the real img2dataset 1.47.0 writes, imported: the committed outputs of
scripts/make_img2dataset_fixtures.sh (30 urls: 24 JPEGs, a truncated JPEG, a text file named .jpg, 4 dead
links) in the files, webdataset and parquet layouts, encoded jpg, webp and png, and with re-encoding off; a
short matrix on them; and the script run end to end with the real img2dataset, in an environment of its own
that the test makes when it is missing."""
from __future__ import annotations

import fcntl
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image

from harness.data.decoders import decode_resize
from harness.data.importer import SourceSpec
from harness.data.layouts import detect_layout
from tests.test_own_data import _run, write_scenario

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "img2dataset"
SCRIPT = ROOT / "scripts" / "make_img2dataset_fixtures.sh"
CAPTIONS = [f"a photo number {i} of a {['red', 'green', 'blue'][i % 3]} gradient" for i in range(24)]
REENCODED = {"failed_to_download": 4, "failed_to_resize": 2}  # dead links; the truncated JPEG and the page
# name: (layout, image format, failed downloads by status, corrupt images)
OUTPUTS = {
    "files-jpg": ("files", "JPEG", REENCODED, 0),
    "webdataset-jpg": ("webdataset", "JPEG", REENCODED, 0),
    "parquet-jpg": ("parquet", "JPEG", REENCODED, 0),
    "files-webp": ("files", "WEBP", REENCODED, 0),
    "webdataset-webp": ("webdataset", "WEBP", REENCODED, 0),
    "parquet-webp": ("parquet", "WEBP", REENCODED, 0),
    "webdataset-png": ("webdataset", "PNG", REENCODED, 0),
    # --disable_all_reencoding: the truncated JPEG and the page are written as they came, and are corrupt here
    "files-original": ("files", "JPEG", {"failed_to_download": 4}, 2),
}
# img2dataset's resize: keep_ratio makes the shorter side 64; center_crop and border give 48x48 and 32x32
SQUARE = {"files-webp": 48, "webdataset-webp": 48, "parquet-webp": 48, "webdataset-png": 32}


I2D_VERSION = "1.47.0"
DEFAULT_I2D = "/tmp/venv-i2d/bin/img2dataset"  # <venv>/bin/img2dataset
# pip's words when no index it can reach has the package (a version missing from a reachable index is a failure)
UNREACHABLE = ("from versions: none", "Failed to establish a new connection", "Name or service not known",
               "Temporary failure in name resolution", "Network is unreachable")


def _install_img2dataset(tool: Path) -> str | None:
    """``python -m venv`` (unless the venv that ``tool``, <venv>/bin/img2dataset, lies in exists) and ``pip install
    img2dataset==1.47.0`` in it (its dependencies would change ours); None when done, else why the package index
    could not be reached. Any other failure fails the test with pip's output; a venv made here that failed is
    removed (one that was there before is left as it was found, less what pip installed)."""
    venv = tool.parent.parent
    made = not (venv / "bin" / "python").exists()
    try:
        if made:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
        done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                               f"img2dataset=={I2D_VERSION}"], capture_output=True, text=True, timeout=500)
    except BaseException:
        if made:
            shutil.rmtree(venv, ignore_errors=True)
        raise
    if done.returncode == 0 and os.access(tool, os.X_OK):
        return None
    if made:
        shutil.rmtree(venv, ignore_errors=True)
    out = done.stdout + done.stderr
    if any(sign in out for sign in UNREACHABLE):
        return (f"the package index is unreachable: pip could not get img2dataset=={I2D_VERSION} for its "
                f"environment {venv} ({out.strip().splitlines()[-1]})")
    raise AssertionError(f"pip install img2dataset=={I2D_VERSION} into {venv} failed:\n{out[-3000:]}")


@pytest.fixture(scope="session")
def img2dataset() -> str:
    """The real img2dataset: IMG2DATASET (an executable; when it is missing and named <venv>/bin/img2dataset,
    that venv is made), else /tmp/venv-i2d/bin/img2dataset, else one on PATH, else /tmp/venv-i2d made now
    (about 55 s). A lock file beside the venv (<venv>.lock) makes parallel sessions build it once; the test is
    skipped only when the package index is unreachable."""
    named = os.environ.get("IMG2DATASET")
    if not named and not os.access(DEFAULT_I2D, os.X_OK) and shutil.which("img2dataset"):
        return shutil.which("img2dataset")
    tool = Path(named or DEFAULT_I2D)
    if os.access(tool, os.X_OK):
        return str(tool)
    if tool.name != "img2dataset" or tool.parent.name != "bin":
        raise AssertionError(f"IMG2DATASET={named} is not an executable, nor a <venv>/bin/img2dataset to make")
    tool.parent.parent.parent.mkdir(parents=True, exist_ok=True)
    with open(tool.parent.parent.with_name(tool.parent.parent.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be making it: wait, then use its venv
        try:
            unreachable = None if os.access(tool, os.X_OK) else _install_img2dataset(tool)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    if unreachable:
        pytest.skip(unreachable)
    return str(tool)


def check_output(root: Path, name: str) -> None:
    layout, fmt, failed, corrupt = OUTPUTS[name]
    assert detect_layout(root) == layout
    spec = SourceSpec(root)
    stats = spec.scan()
    assert (stats.samples, stats.corrupt, stats.empty_captions) == (24, corrupt, 0)
    assert stats.failed_downloads == sum(failed.values()) and stats.failed_statuses == failed
    assert stats.formats == {fmt: 24} and stats.non_jpeg == (0 if fmt == "JPEG" else 24)
    assert stats.to_dict()["non_jpeg"] == stats.non_jpeg
    samples = list(spec.iter_samples())
    assert [s.caption for s in samples] == CAPTIONS  # img2dataset's caption column, .txt or txt member
    assert [s.index for s in samples] == list(range(24))
    for s in samples[:3]:
        img = Image.open(io.BytesIO(s.jpeg))
        assert img.format == fmt
        if name in SQUARE:
            assert img.size == (SQUARE[name], SQUARE[name])
        elif name != "files-original":
            assert min(img.size) == 64


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_every_real_img2dataset_output_imports(name):
    check_output(FIXTURES / name, name)


def test_the_parquet_layout_has_a_caption_column_and_null_images_for_failed_downloads():
    """What img2dataset's parquet layout really is: no txt column, the image column named by the encode format,
    a row for each failed url with a null image and its status."""
    for name, column in (("parquet-jpg", "jpg"), ("parquet-webp", "webp")):
        table = pq.read_table(FIXTURES / name / "00000.parquet")
        assert "txt" not in table.schema.names and {"caption", "key", "status", column} <= set(table.schema.names)
        rows = table.select(["status", column]).to_pylist()
        failed = [r["status"] for r in rows if r[column] is None]
        assert sorted(failed) == ["failed_to_download"] * 4 + ["failed_to_resize"] * 2


def test_webp_and_png_sources_decode_with_both_decoders():
    from harness.data import decoders

    for name in ("files-webp", "webdataset-png"):
        sample = next(SourceSpec(FIXTURES / name).iter_samples())
        before = decoders.pil_fallbacks()
        pil, fast = decode_resize(sample.jpeg, 32, "pil"), decode_resize(sample.jpeg, 32, "simplejpeg")
        assert pil.shape[2] == 3 and max(pil.shape[:2]) == 32 and (pil == fast).all()
        assert decoders.pil_fallbacks() == before + 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["parquet-jpg", "webdataset-webp", "files-webp", "parquet-webp"])
def test_a_short_matrix_runs_on_real_img2dataset_output(name, tmp_path):
    path = write_scenario(tmp_path / "own.toml", workers=1,
                          storages='["mmap", "parquet", { name = "webdataset", shard_size = 5 }]')
    run_dir, cells, env = _run(tmp_path, ["--scenario", str(path), "--data", str(FIXTURES / name)])
    assert len(cells) == 6 and all(c.measured and c.contract_ok for c in cells)
    imp = env["import"]
    assert (imp["samples"], imp["corrupt"], imp["failed_downloads"]) == (24, 0, 6)


@pytest.mark.slow
def test_the_real_img2dataset_regenerates_the_fixtures(tmp_path, img2dataset):
    """The script end to end: img2dataset downloads from a local http.server; its output imports as the
    committed one does (and is byte for byte the same with the pinned img2dataset)."""
    out = tmp_path / "img2dataset"
    env = dict(os.environ, IMG2DATASET=img2dataset, PORT=os.environ.get("I2D_PORT", "8765"))
    done = subprocess.run(["bash", str(SCRIPT), str(out)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    for name in OUTPUTS:
        check_output(out / name, name)
    same = subprocess.run(["diff", "-r", "-q", str(out), str(FIXTURES)], capture_output=True, text=True)
    assert same.returncode == 0, same.stdout[-2000:]


def test_jpeg_flags_mark_each_samples_format_and_survive_a_saved_scan(tmp_path):
    webp = SourceSpec(FIXTURES / "parquet-webp")
    assert webp.jpeg_flags().shape == (24,) and not webp.jpeg_flags().any()
    jpg = SourceSpec(FIXTURES / "parquet-jpg")
    assert jpg.jpeg_flags().all()
    jpg.save_scan(tmp_path)
    again = SourceSpec(FIXTURES / "parquet-jpg")
    assert again.load_scan(tmp_path) and again.jpeg_flags().all() and again.stats.failed_downloads == 6
