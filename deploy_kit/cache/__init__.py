"""`deploykit cache stats|purge`: the LMCache objects in the bucket, by model/TP/dtype."""
