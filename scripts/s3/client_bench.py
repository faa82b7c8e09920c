"""Which S3 client reads byte ranges fastest from one worker: boto3, obstore and s3fs against the project's own
local object store (moto's server mode, loopback, unshaped), interleaved rounds, as ratios in one run.

    python scripts/s3/client_bench.py [--rounds 3] [--small 200] [--large 8]

Small: sequential 16 KiB range GETs (a sample's bytes) -> requests/s. Large: sequential 8 MiB range GETs of a
64 MiB object -> MB/s. One thread, one request at a time: what one DataLoader worker does without parallel reads.
The server's own per-request cost is printed first: a client's small-GET figure near it is bound by the server.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the harness, also where it is not installed

SMALL, LARGE_OBJ, LARGE = 16 << 10, 64 << 20, 8 << 20


def clients(endpoint: str, bucket: str) -> dict:
    import boto3
    import obstore
    import s3fs
    from obstore.store import S3Store

    from harness.lab.server import KEYS

    b3 = boto3.client("s3", endpoint_url=endpoint, region_name=KEYS["AWS_DEFAULT_REGION"])
    ob = S3Store(bucket, endpoint=endpoint, region=KEYS["AWS_DEFAULT_REGION"], client_options={"allow_http": True})
    fs = s3fs.S3FileSystem(endpoint_url=endpoint, key=KEYS["AWS_ACCESS_KEY_ID"], secret=KEYS["AWS_SECRET_ACCESS_KEY"])

    def boto3_get(key, start, length):
        return b3.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{start + length - 1}")["Body"].read()

    def obstore_get(key, start, length):
        return bytes(obstore.get_range(ob, key, start=start, length=length))

    def s3fs_get(key, start, length):
        return fs.cat_file(f"{bucket}/{key}", start=start, end=start + length)

    return {"boto3": boto3_get, "obstore": obstore_get, "s3fs": s3fs_get}


def timed(get, key: str, n: int, length: int, span: int) -> tuple[float, float]:
    """(wall s, this process's CPU s, every thread) for n sequential range GETs."""
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n):
        data = get(key, (i * length) % (span - length), length)
        assert len(data) == length
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--small", type=int, default=200)
    ap.add_argument("--large", type=int, default=8)
    args = ap.parse_args()
    from harness.lab.server import ObjectServer, request_cost

    print("load:", os.getloadavg())
    with ObjectServer("bench") as server:
        os.environ.update(server.env())
        print(request_cost(server).line())
        import boto3
        s3 = boto3.client("s3", endpoint_url=server.endpoint)
        s3.put_object(Bucket="bench", Key="small", Body=os.urandom(4 << 20))
        s3.put_object(Bucket="bench", Key="large", Body=os.urandom(LARGE_OBJ))
        gets = clients(server.endpoint, "bench")
        for get in gets.values():
            get("small", 0, 10)
        rps, mbs, cpu_req, cpu_mb = ({k: [] for k in gets} for _ in range(4))
        for _ in range(args.rounds):
            for name, get in gets.items():
                wall, cpu = timed(get, "small", args.small, SMALL, 4 << 20)
                rps[name].append(args.small / wall)
                cpu_req[name].append(1000 * cpu / args.small)
                wall, cpu = timed(get, "large", args.large, LARGE, LARGE_OBJ)
                mbs[name].append(args.large * LARGE / 1e6 / wall)
                cpu_mb[name].append(1000 * cpu / (args.large * LARGE / 1e6))
        med = statistics.median
        base_r, base_m = med(rps["boto3"]), med(mbs["boto3"])
        for name in gets:
            r, m = med(rps[name]), med(mbs[name])
            print(f"{name:8s} {r:6.0f} req/s (16 KiB; x{r / base_r:.2f} of boto3), client CPU "
                  f"{med(cpu_req[name]):.2f} ms/request | {m:5.0f} MB/s (8 MiB; x{m / base_m:.2f}), client CPU "
                  f"{med(cpu_mb[name]):.2f} ms/MB | rounds req/s {[round(x) for x in rps[name]]}, "
                  f"MB/s {[round(x) for x in mbs[name]]}")
    print("load:", os.getloadavg())


if __name__ == "__main__":
    main()
