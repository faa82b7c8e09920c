"""Remote data: an S3-compatible bucket read by byte ranges (s3client; the readers' shared base and
their counters: rangesource), behind an optional disk cache tier (disktier), and one reader per
shard format (s3webdataset, s3parquet, s3raw, s3litdata)."""
