-- One Postgres for both servers: a database each (run once, on the first start of the volume).
CREATE DATABASE mlflow;
CREATE DATABASE prefect;
