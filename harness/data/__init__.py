"""data: the samples a run reads: the CC3M-like generator, your own data imported from img2dataset
layouts (importer; a bucket's prefix mirrored to local disk first: bucket), one materialisation per
storage with its manifest (materialise, verify), the page cache made warm or cold (pagecache), JPEG
decoders and the fields each workload reads (decoders, fields)."""
