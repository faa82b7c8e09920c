"""Importing a user's dataset: the four layouts built on the fly (real JPEGs from PIL, real tars and Parquet),
detection, order, counts, corrupt JPEGs, captions, embeddings, the source key and clean errors."""
from __future__ import annotations

import io
import json
import os
import tarfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from harness.data.embeddings import decode_small, image_embedding, text_embedding
from harness.data.importer import SourceSpec
from harness.data.layouts import LAYOUTS, detect_layout
from harness.errors import UsageError
from strategies import registry
from strategies.sample import IMAGE_EMB_DIM, TEXT_EMB_DIM

N = 24  # images per dataset; shards of 10


def _jpeg(i: int) -> bytes:
    rng = np.random.default_rng(i)
    h, w = 20 + 3 * (i % 7), 24 + 5 * (i % 5)
    arr = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(arr, "RGB").save(out, format="JPEG", quality=80)
    return out.getvalue()


ITEMS = [(f"{i:09d}", _jpeg(i), f"a photo number {i} of a red house") for i in range(N)]
CORRUPT = {5: _jpeg(5)[: len(_jpeg(5)) // 2], 11: b"definitely not a jpeg"}  # truncated, garbage


def _items(corrupt: bool):
    return [(k, CORRUPT[i] if corrupt and i in CORRUPT else j, c) for i, (k, j, c) in enumerate(ITEMS)]


def _metadata_parquet(path, keys):
    """What img2dataset writes beside files and tar shards: metadata without images."""
    pq.write_table(pa.table({"key": keys, "url": [f"http://x/{k}" for k in keys], "status": ["success"] * len(keys)}),
                   path)


def make_files(root, corrupt=False, drop_caption=None, json_caption=None):
    for i, (key, jpeg, caption) in enumerate(_items(corrupt)):
        shard = root / f"{i // 10:05d}"
        shard.mkdir(parents=True, exist_ok=True)
        (shard / f"{key}.jpg").write_bytes(jpeg)
        if i not in (drop_caption, json_caption):
            (shard / f"{key}.txt").write_text(caption)
        meta = {"key": key} if i == drop_caption else {"key": key, "caption": caption}
        (shard / f"{key}.json").write_text(json.dumps(meta))
    for s in range(3):
        _metadata_parquet(root / f"{s:05d}.parquet", [k for k, _, _ in ITEMS[s * 10:(s + 1) * 10]])
        (root / f"{s:05d}_stats.json").write_text("{}")
    return root


def _add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def make_webdataset(root, corrupt=False):
    root.mkdir(parents=True, exist_ok=True)
    items = _items(corrupt)
    for s in range(3):
        with tarfile.open(root / f"{s:05d}.tar", "w") as tar:
            # members of a sample in the order img2dataset writes them, keys in reverse: the reader sorts
            for key, jpeg, caption in reversed(items[s * 10:(s + 1) * 10]):
                _add(tar, f"{key}.jpg", jpeg)
                _add(tar, f"{key}.txt", caption.encode())
                _add(tar, f"{key}.json", json.dumps({"key": key}).encode())
        _metadata_parquet(root / f"{s:05d}.parquet", [k for k, _, _ in items[s * 10:(s + 1) * 10]])
    return root


def make_parquet(root, corrupt=False):
    root.mkdir(parents=True, exist_ok=True)
    items = _items(corrupt)
    for s in range(3):
        part = items[s * 10:(s + 1) * 10]
        pq.write_table(pa.table({"key": [k for k, _, _ in part], "jpg": [j for _, j, _ in part],
                                 "txt": [c for _, _, c in part], "width": [1] * len(part)}),
                       root / f"{s:05d}.parquet", row_group_size=4)
    return root


def make_folder(root, corrupt=False):
    root.mkdir(parents=True, exist_ok=True)
    for key, jpeg, caption in _items(corrupt):
        (root / f"img_{key}.jpg").write_bytes(jpeg)
        (root / f"img_{key}.txt").write_text(caption + "\n")
    return root


MAKERS = {"files": make_files, "webdataset": make_webdataset, "parquet": make_parquet, "folder": make_folder}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("sources")
    return {layout: MAKERS[layout](root / layout) for layout in LAYOUTS}


@pytest.fixture(scope="module")
def corrupt_sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("corrupt")
    return {layout: MAKERS[layout](root / layout, corrupt=True) for layout in LAYOUTS}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_detects_the_layout_and_reads_every_sample_in_key_order(layout, sources):
    assert detect_layout(sources[layout]) == layout
    spec = SourceSpec(sources[layout])
    assert spec.layout == layout and spec.count() == spec.samples == N
    got = list(spec.iter_samples())
    assert [s.index for s in got] == list(range(N))
    assert [s.jpeg for s in got] == [j for _, j, _ in ITEMS]
    assert [s.caption for s in got] == [c for _, _, c in ITEMS]
    stats = spec.stats
    assert (stats.candidates, stats.corrupt, stats.empty_captions, stats.embeddings) == (N, 0, 0, "projection")
    sides = spec.image_sides()
    assert sides.shape == (N, 2)
    assert [tuple(x) for x in sides] == [(20 + 3 * (i % 7), 24 + 5 * (i % 5)) for i in range(N)]


def test_all_layouts_give_identical_samples(sources):
    per_layout = [list(SourceSpec(sources[layout]).iter_samples()) for layout in LAYOUTS]
    for row in zip(*per_layout):
        assert all(row[0].same_as(other) for other in row[1:])


def test_embeddings_are_deterministic_unit_vectors_of_the_models_sizes(sources):
    a = list(SourceSpec(sources["files"]).iter_samples())
    b = list(SourceSpec(sources["files"]).iter_samples())
    for s, t in zip(a, b):
        assert s.image_emb.shape == (IMAGE_EMB_DIM,) and s.text_emb.shape == (TEXT_EMB_DIM,)
        assert s.image_emb.dtype == np.float32 and s.text_emb.dtype == np.float32
        assert abs(np.linalg.norm(s.image_emb) - 1) < 1e-5 and abs(np.linalg.norm(s.text_emb) - 1) < 1e-5
        assert np.array_equal(s.image_emb, t.image_emb) and np.array_equal(s.text_emb, t.text_emb)
    # the documented recipe: decode at 32x32, project; captions: hashed tokens
    small, _ = decode_small(ITEMS[3][1])
    assert small.shape == (32, 32, 3)
    assert np.array_equal(a[3].image_emb, image_embedding(small))
    assert np.array_equal(a[3].text_emb, text_embedding(ITEMS[3][2]))
    # different images and captions, different vectors; same words, same text vector
    assert not np.array_equal(a[0].image_emb, a[1].image_emb)
    assert np.array_equal(text_embedding("Red  house"), text_embedding("red house"))
    assert abs(np.linalg.norm(text_embedding("")) - 1) < 1e-5


@pytest.mark.parametrize("layout", LAYOUTS)
def test_corrupt_jpegs_are_skipped_and_counted(layout, corrupt_sources):
    spec = SourceSpec(corrupt_sources[layout])
    assert spec.count() == N - len(CORRUPT)
    stats = spec.stats
    assert stats.candidates == N and stats.corrupt == len(CORRUPT) and len(stats.corrupt_keys) == len(CORRUPT)
    got = list(spec.iter_samples())
    assert [s.index for s in got] == list(range(N - len(CORRUPT)))
    assert [s.jpeg for s in got] == [j for i, (_, j, _) in enumerate(ITEMS) if i not in CORRUPT]
    assert len(spec.image_sides()) == N - len(CORRUPT)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_strict_fails_on_the_first_corrupt_jpeg(layout, corrupt_sources):
    with pytest.raises(UsageError, match=r"is not a readable image .*without --strict") as err:
        SourceSpec(corrupt_sources[layout], strict=True).count()
    assert ITEMS[5][0] in str(err.value) and "\n" not in str(err.value)


def test_missing_captions_are_an_error_or_empty_when_asked(tmp_path):
    root = make_files(tmp_path / "src", drop_caption=7)
    with pytest.raises(UsageError, match=f"{ITEMS[7][0]}.jpg has no caption"):
        SourceSpec(root).count()
    spec = SourceSpec(root, missing_captions="empty")
    got = list(spec.iter_samples())
    assert spec.stats.empty_captions == 1 and got[7].caption == "" and got[8].caption == ITEMS[8][2]
    assert SourceSpec(root, missing_captions="empty").key() != SourceSpec(root).key()


def test_a_caption_missing_as_txt_is_read_from_img2datasets_json(tmp_path):
    root = make_files(tmp_path / "src", json_caption=7)
    assert not list(root.glob(f"*/{ITEMS[7][0]}.txt"))
    got = list(SourceSpec(root).iter_samples())
    assert [s.caption for s in got] == [c for _, _, c in ITEMS]


def test_limit_takes_the_first_samples(sources):
    spec = SourceSpec(sources["webdataset"], limit=7)
    got = list(spec.iter_samples())
    assert spec.count() == 7 and [s.jpeg for s in got] == [j for _, j, _ in ITEMS[:7]]


def test_source_embeddings_are_used_when_present(tmp_path):
    root = make_folder(tmp_path / "src")
    rng = np.random.default_rng(0)
    embs = {}
    for key, _, _ in ITEMS:
        embs[key] = (rng.standard_normal(IMAGE_EMB_DIM).astype(np.float32),
                     rng.standard_normal(TEXT_EMB_DIM).astype(np.float32))
        np.save(root / f"img_{key}.image_emb.npy", embs[key][0])
        np.save(root / f"img_{key}.text_emb.npy", embs[key][1])
    spec = SourceSpec(root)
    got = list(spec.iter_samples())
    assert spec.stats.embeddings == "source"
    assert all(np.array_equal(s.image_emb, embs[k][0]) for s, (k, _, _) in zip(got, ITEMS))
    np.save(root / f"img_{ITEMS[2][0]}.image_emb.npy", np.zeros(512, np.float32))  # a CLIP ViT-B size
    with pytest.raises(UsageError, match="image_emb has 512 values, the harness's models take 2048"):
        list(SourceSpec(root).iter_samples())


def test_key_follows_the_files(tmp_path):
    root = make_folder(tmp_path / "src")
    k1 = SourceSpec(root).key()
    assert SourceSpec(root).key() == k1 and k1.startswith("src-")
    assert SourceSpec(root, limit=5).key() != k1
    p = root / f"img_{ITEMS[0][0]}.txt"
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert SourceSpec(root).key() != k1
    (root / "extra.jpg").write_bytes(ITEMS[1][1])
    (root / "extra.txt").write_text("x")
    spec = SourceSpec(root)
    assert spec.count() == N + 1


def test_a_saved_scan_is_reused_while_the_source_is_unchanged(corrupt_sources, tmp_path):
    spec = SourceSpec(corrupt_sources["webdataset"])
    calls = []
    stats = spec.scan(progress=calls.append)
    assert calls[-1] == N and stats.corrupt == len(CORRUPT)
    spec.save_scan(tmp_path)
    again = SourceSpec(corrupt_sources["webdataset"])
    assert again.load_scan(tmp_path)
    assert again.stats == stats and np.array_equal(again.image_sides(), spec.image_sides())
    assert [s.jpeg for s in again.iter_samples()] == [s.jpeg for s in spec.iter_samples()]
    assert not SourceSpec(corrupt_sources["webdataset"], limit=3).load_scan(tmp_path)  # another key


@pytest.mark.parametrize("storage", ("mmap", "webdataset", "parquet", "lmdb"))
def test_streams_into_a_storage(storage, sources, tmp_path):
    spec = SourceSpec(sources["parquet"])
    expected = list(spec.iter_samples())
    strategy = registry.create("storage", storage)
    strategy.write(spec.iter_samples(), tmp_path / storage, spec.count())
    reader = strategy.open(tmp_path / storage)
    got = reader.read_batch([23, 0, 7, 7])
    assert all(s.same_as(expected[s.index]) for s in got)
    reader.close()


# ---- bad sources: one line naming the path and the remedy ----


def _one_line(err) -> str:
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_missing_path_file_and_empty_folder(tmp_path):
    with pytest.raises(UsageError) as err:
        SourceSpec(tmp_path / "nope")
    assert f"{tmp_path / 'nope'} does not exist" in _one_line(err) and "img2dataset" in str(err.value)
    (tmp_path / "f.tar").write_bytes(b"")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        SourceSpec(tmp_path / "f.tar")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / ".hidden").write_text("")
    with pytest.raises(UsageError, match="empty; pass the folder img2dataset wrote"):
        SourceSpec(tmp_path / "empty")


def test_unknown_layouts(tmp_path):
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "urls.csv").write_text("url,caption\n")
    with pytest.raises(UsageError, match="unknown layout") as err:
        SourceSpec(tmp_path / "csv")
    assert str(tmp_path / "csv") in _one_line(err)
    meta = tmp_path / "meta"
    meta.mkdir()
    _metadata_parquet(meta / "00000.parquet", ["a"])
    with pytest.raises(UsageError, match="no image column"):
        SourceSpec(meta)
    gif = tmp_path / "gif"
    gif.mkdir()
    Image.new("RGB", (8, 8)).save(gif / "a.gif")
    with pytest.raises(UsageError, match="no JPEG, webp or PNG .*--encode_format jpg"):
        SourceSpec(gif)


def test_explicit_layout_is_checked(sources):
    assert SourceSpec(sources["files"], layout="files").layout == "files"
    with pytest.raises(UsageError, match="does not hold the webdataset layout"):
        SourceSpec(sources["files"], layout="webdataset")
    with pytest.raises(UsageError, match="unknown data format 'tfrecord'; known: files, webdataset, parquet, folder"):
        SourceSpec(sources["files"], layout="tfrecord")


def test_only_corrupt_images_is_an_error(tmp_path):
    root = tmp_path / "bad"
    root.mkdir()
    (root / "a.jpg").write_bytes(b"garbage")
    (root / "a.txt").write_text("x")
    with pytest.raises(UsageError, match=r"no usable sample \(1 corrupt or unsupported images\)"):
        SourceSpec(root).count()


def test_img2dataset_parquet_rows_in_completion_order_with_failed_rows(tmp_path):
    """img2dataset's parquet layout: a caption column (no txt), the image column named by the encode format,
    rows in the order downloads completed, a null image for each failed url: read in row order, failed rows
    counted apart, a corrupt row named by its key."""
    root = tmp_path / "pq"
    root.mkdir()
    order = [3, 0, 2, 1, 5, 4]
    webp = []
    for i in order:
        out = io.BytesIO()
        Image.open(io.BytesIO(ITEMS[i][1])).save(out, format="WEBP")
        webp.append(out.getvalue())
    webp[2] = None  # a failed download
    webp[4] = b"garbage"  # a corrupt image
    status = ["success", "success", "failed_to_download", "success", "success", "success"]
    pq.write_table(pa.table({"caption": [ITEMS[i][2] for i in order], "key": [ITEMS[i][0] for i in order],
                             "status": status, "webp": pa.array(webp, pa.binary())}), root / "00000.parquet")
    spec = SourceSpec(root)
    assert spec.layout == "parquet"
    got = list(spec.iter_samples())
    assert [s.caption for s in got] == [ITEMS[i][2] for i in (3, 0, 1, 4)]
    stats = spec.stats
    assert (stats.samples, stats.corrupt, stats.failed_downloads) == (4, 1, 1)
    assert stats.failed_statuses == {"failed_to_download": 1} and stats.formats == {"WEBP": 4}
    assert stats.corrupt_keys[0].startswith(f"00000.parquet:4 (key {ITEMS[5][0]})")


def _jpeg() -> bytes:
    from harness.data.generator import DatasetSpec, generate_sample

    return generate_sample(DatasetSpec(samples=1, seed=0, profile="tiny"), 0).jpeg


def test_a_caption_that_is_not_utf8_is_one_line_naming_its_file(tmp_path):
    """It ended in "internal error (a bug in the harness)": a folder's .txt and a webdataset tar's txt member."""
    import io
    import tarfile

    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.jpg").write_bytes(_jpeg())
    (folder / "a.txt").write_bytes(b"caf\xe9 au lait")  # latin-1, not UTF-8
    with pytest.raises(UsageError, match=r"a\.txt: the caption is not UTF-8 text \(byte 0xe9 at offset 3\)"):
        SourceSpec(folder).scan()
    shards = tmp_path / "wds"
    shards.mkdir()
    with tarfile.open(shards / "00000.tar", "w") as tar:
        for name, data in (("0001.jpg", _jpeg()), ("0001.txt", b"\xff\xfe")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(UsageError, match=r"00000\.tar:0001\.txt: the caption is not UTF-8 text"):
        SourceSpec(shards).scan()


def test_a_parquet_image_column_of_another_type_is_one_line(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"jpg": ["not bytes"], "caption": ["a cat"]}), tmp_path / "00000.parquet")
    with pytest.raises(UsageError, match=r"00000\.parquet: its image column 'jpg' holds string, not image bytes"):
        SourceSpec(tmp_path).scan()


def test_an_image_above_the_pixel_limit_is_counted_and_skipped_without_a_warning(tmp_path, recwarn):
    """An 11000 x 11000 PNG of a few hundred KB passed PIL's hard limit, printed its DecompressionBombWarning,
    took 648 MB to scan and was decoded whole each epoch: the harness's own limit counts it as unusable."""
    import io

    from PIL import Image

    from harness.data.embeddings import MAX_PIXELS

    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "ok.jpg").write_bytes(_jpeg())
    (folder / "ok.txt").write_text("a cat")
    buf = io.BytesIO()
    Image.new("L", (11000, 11000)).save(buf, "PNG")
    (folder / "huge.png").write_bytes(buf.getvalue())
    (folder / "huge.txt").write_text("a field")
    stats = SourceSpec(folder).scan()
    assert 11000 * 11000 > MAX_PIXELS and stats.corrupt == 1 and stats.candidates == 2
    assert "huge.png: 11000 x 11000 pixels, above the harness's limit" in stats.corrupt_keys[0]
    assert not [w for w in recwarn if "DecompressionBomb" in type(w.message).__name__]
