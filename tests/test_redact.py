"""Secret shapes are replaced by a marker wherever bench writes them."""
from bench.core.redact import REDACTED, redact_argv, redact_env, redact_text

SAS_URL = "https://acct.blob.core.windows.net/data?sv=2022-11-02&ss=b&sp=rl&sig=AbCd%2Bsecret%2Fsig%3D"
CONN = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=c2VjcmV0a2V5c2VjcmV0a2V5PT0=;EndpointSuffix=x"


def test_names_that_look_sensitive_lose_their_values():
    env = redact_env({"AZURE_STORAGE_KEY": "k1", "MY_TOKEN": "t", "DB_PASSWORD": "p", "SAS_URL": "u",
                      "AZURE_STORAGE_CONNECTION_STRING": "c", "OMP_NUM_THREADS": "2", "DATA": SAS_URL})
    assert env["OMP_NUM_THREADS"] == "2"
    assert all(env[k] == REDACTED for k in ("AZURE_STORAGE_KEY", "MY_TOKEN", "DB_PASSWORD", "SAS_URL",
                                            "AZURE_STORAGE_CONNECTION_STRING"))
    assert "secret" not in env["DATA"] and "sv=2022-11-02" in env["DATA"]


def test_secrets_inside_text_and_argv():
    text = redact_text(f"reading {SAS_URL}\nconn={CONN}\nAuthorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc.def "
                       f"CLIENT_SECRET=s3cr3t")
    for secret in ("AbCd%2Bsecret", "c2VjcmV0a2V5", "eyJhbGciOiJIUzI1NiJ9", "s3cr3t"):
        assert secret not in text
    argv = redact_argv(["python", "w.py", "--storage-key", "k3y", "--sas-token=tok", "--steps", "5", SAS_URL])
    assert argv[:4] == ["python", "w.py", "--storage-key", REDACTED]
    assert argv[4] == f"--sas-token={REDACTED}" and argv[5:7] == ["--steps", "5"]
    assert "secret" not in argv[7]
