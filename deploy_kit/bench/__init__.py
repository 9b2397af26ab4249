"""`deploykit bench storage`: S3 throughput of chunk-sized objects, client against client."""
