"""Remote data: an S3-compatible bucket read by byte ranges (s3client), behind an optional disk cache tier
(strategies.cache.disk), and one reader per shard format (s3webdataset, s3parquet, s3raw)."""
