import pytest

SAMPLE = """\
2024-05-01T10:00:00 INFO  web: started on :8080
2024-05-01T10:00:01 DEBUG db: pool size 4
2024-05-01T10:00:03 WARN  db: slow query (812 ms)
this line is noise
2024-05-01T10:01:10 INFO  web: GET /health 200
2024-05-01T10:02:41 ERROR db: connection reset
2024-05-01T10:02:42 WARN  web: retrying request
2024-05-01T10:03:00 ERROR web: upstream timeout
"""


@pytest.fixture()
def sample_log(tmp_path):
    path = tmp_path / "app.log"
    path.write_text(SAMPLE, encoding="utf-8")
    return str(path)
