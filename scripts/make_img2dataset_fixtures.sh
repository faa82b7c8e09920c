#!/usr/bin/env bash
# Regenerate tests/fixtures/img2dataset/ with the real img2dataset 1.47.0 (see docs/own-data.md).
#
#   python -m venv /tmp/venv-i2d && /tmp/venv-i2d/bin/pip install img2dataset==1.47.0   # once, kept apart
#   scripts/make_img2dataset_fixtures.sh [OUTPUT_DIR]    # default tests/fixtures/img2dataset
#
# The test that runs this script (tests/test_img2dataset.py, test_the_real_img2dataset_regenerates_the_fixtures)
# makes that environment itself when it is missing, under a lock (/tmp/venv-i2d.lock), where IMG2DATASET points.
#
# IMG2DATASET (default /tmp/venv-i2d/bin/img2dataset, else the one on PATH) downloads url list sources.csv
# from a `python -m http.server` on 127.0.0.1:$PORT (default 8765: the port is part of the urls and error
# messages the metadata keeps, so keep it to regenerate byte for byte). The 30 urls: 24 generated JPEGs of
# CC3M-like sides (300-640 px, 3:4 to 16:9), one truncated JPEG, one text file named .jpg, four dead links.
# One process and one thread each, so rows come in url order (with more threads img2dataset writes them in
# completion order). Every run's *_stats.json (start and end times) is removed and the members of its tar
# shards get modification time 0 (webdataset stamps each with the time of writing; the tar is rewritten
# member for member, data and order unchanged); the rest is what img2dataset wrote. Runs, one folder each:
#   files-jpg          files layout, jpg, keep_ratio 64 px, --save_additional_columns '["license"]'
#   webdataset-jpg     webdataset, jpg, keep_ratio 64 px
#   parquet-jpg        parquet, jpg, keep_ratio 64 px (failed downloads are rows with jpg = null)
#   files-webp         files, webp, center_crop 48 px
#   webdataset-webp    webdataset, webp, center_crop 48 px
#   parquet-webp       parquet, webp, center_crop 48 px
#   webdataset-png     webdataset, png, border 32 px
#   files-original     files, --disable_all_reencoding (the served bytes as they are: the truncated JPEG too)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-tests/fixtures/img2dataset}
PORT=${PORT:-8765}
I2D=${IMG2DATASET:-/tmp/venv-i2d/bin/img2dataset}
[ -x "$I2D" ] || I2D=$(command -v img2dataset || true)
if [ -z "$I2D" ]; then
  echo "img2dataset not found: python -m venv /tmp/venv-i2d && /tmp/venv-i2d/bin/pip install img2dataset==1.47.0" \
    "(python -m pytest tests/test_img2dataset.py -k regenerates makes it too)" >&2
  exit 2
fi
WORK=$(mktemp -d)
SERVER=""
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

python - "$WORK/site" "$WORK/sources.csv" "$PORT" <<'PY'
import csv, io, sys
from pathlib import Path
import numpy as np
from PIL import Image

site, csv_path, port = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
site.mkdir()
rng = np.random.default_rng(20)
sides = [(300, 400), (375, 500), (480, 640), (360, 640), (400, 300), (500, 375), (512, 512), (427, 640)]
rows = []
for i in range(24):
    h, w = sides[i % len(sides)]
    y, x = np.mgrid[0:h, 0:w]
    a, b, c = rng.integers(0, 255, 3)
    img = np.stack([(x * 255 // w + a) % 256, (y * 255 // h + b) % 256, ((x + y) // 4 + c) % 256], -1)
    buf = io.BytesIO()
    Image.fromarray(img.astype(np.uint8)).save(buf, "JPEG", quality=70)
    (site / f"img{i:02d}.jpg").write_bytes(buf.getvalue())
    rows.append((f"img{i:02d}.jpg", f"a photo number {i} of a {['red', 'green', 'blue'][i % 3]} gradient", "cc-by"))
whole = (site / "img00.jpg").read_bytes()
(site / "truncated.jpg").write_bytes(whole[: len(whole) // 2])
rows.append(("truncated.jpg", "a truncated photo", "cc-by"))
(site / "notimage.jpg").write_text("<html>not an image</html>\n")
rows.append(("notimage.jpg", "a page that is not an image", "cc0"))
rows += [(f"missing{k}.jpg", f"a dead link {k}", "cc0") for k in range(4)]
with open(csv_path, "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(["url", "caption", "license"])
    for name, caption, lic in rows:
        out.writerow([f"http://127.0.0.1:{port}/{name}", caption, lic])
PY

python -m http.server "$PORT" --bind 127.0.0.1 --directory "$WORK/site" >/dev/null 2>&1 &
SERVER=$!
for _ in $(seq 50); do
  python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/img00.jpg')" 2>/dev/null && break
  sleep 0.2
done

run() {  # name, then img2dataset options
  local name=$1; shift
  rm -rf "${OUT:?}/$name"
  NO_ALBUMENTATIONS_UPDATE=1 "$I2D" --url_list "$WORK/sources.csv" --input_format csv --url_col url \
    --caption_col caption --output_folder "$OUT/$name" --processes_count 1 --thread_count 1 --timeout 5 \
    --retries 0 --enable_wandb False --number_sample_per_shard 100 "$@" >"$WORK/$name.log" 2>&1 \
    || { cat "$WORK/$name.log" >&2; exit 1; }
  rm -f "$OUT/$name"/*_stats.json
  python - "$OUT/$name" <<'PY'
import sys, tarfile
from pathlib import Path
for path in sorted(Path(sys.argv[1]).glob("*.tar")):
    with tarfile.open(path) as src:
        members = [(m, src.extractfile(m).read() if m.isfile() else None) for m in src.getmembers()]
        fmt = src.format
    tmp = path.with_suffix(".tar.tmp")
    with tarfile.open(tmp, "w", format=fmt) as dst:
        for m, data in members:
            m.mtime = 0
            if "mtime" in m.pax_headers:  # webdataset's float times go to a pax header
                m.pax_headers["mtime"] = "0"
            dst.addfile(m, __import__("io").BytesIO(data) if data is not None else None)
    tmp.replace(path)
PY
}
mkdir -p "$OUT"
run files-jpg --output_format files --encode_format jpg --image_size 64 --resize_mode keep_ratio \
  --save_additional_columns '["license"]'
run webdataset-jpg --output_format webdataset --encode_format jpg --image_size 64 --resize_mode keep_ratio
run parquet-jpg --output_format parquet --encode_format jpg --image_size 64 --resize_mode keep_ratio
run files-webp --output_format files --encode_format webp --image_size 48 --resize_mode center_crop
run webdataset-webp --output_format webdataset --encode_format webp --image_size 48 --resize_mode center_crop
run parquet-webp --output_format parquet --encode_format webp --image_size 48 --resize_mode center_crop
run webdataset-png --output_format webdataset --encode_format png --image_size 32 --resize_mode border \
  --encode_quality 9
run files-original --output_format files --disable_all_reencoding True
du -sh "$OUT"
