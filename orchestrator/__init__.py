"""compilebench's driver side: specs, sweeps, Ray scheduling, reports, the CLI."""

import os

# Ray reads these when it is imported. Its defaults retry an unreachable address for about
# 14 minutes (20 attempts of ~41 s); these make `--address` fail in about 30 s instead.
# A user's own settings win.
for _name, _value in {
    "RAY_gcs_rpc_server_connect_timeout_s": "2",  # default 5
    "RAY_py_gcs_connect_timeout_s": "5",  # default 30
    "RAY_NUM_REDIS_GET_RETRIES": "3",  # default 20
    "RAY_CLIENT_INITIAL_CONNECTION_TIMEOUT_S": "2",  # ray:// clients, default 5
    "RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S": "10",  # ray:// clients, default 30
}.items():
    os.environ.setdefault(_name, _value)
