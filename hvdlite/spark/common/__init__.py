"""What the Spark ML Estimators share: the Store (where data, checkpoints and logs go), the parameters with
Horovod's names, the data path (a DataFrame to Parquet, Parquet to each rank's batches) and the backend that runs
the ranks."""
