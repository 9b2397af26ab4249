"""The pure parts of the probes: SigV4 against botocore, unit/profile parsing, XML."""

from __future__ import annotations

import datetime

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from deploy_kit.transport.sigv4 import Credentials, signed_headers
from deploy_kit.verify.doctor import diagnose
from deploy_kit.verify.probes.s3_probe import parse_lifecycle
from deploy_kit.verify.probes.serving_probe import exec_argv


def test_sigv4_matches_botocore(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import botocore.auth

    now = datetime.datetime(2026, 12, 2, 12, 0, 0, tzinfo=datetime.UTC)

    class Frozen(datetime.datetime):
        @classmethod
        def utcnow(cls) -> datetime.datetime:  # type: ignore[override]
            return now.replace(tzinfo=None)

        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> datetime.datetime:  # type: ignore[override]
            return now if tz else now.replace(tzinfo=None)

    monkeypatch.setattr(botocore.auth.datetime, "datetime", Frozen)
    ours = signed_headers("PUT", "/obj%40x", "lmcache.s3.t.test", "default",
                          Credentials("AKID", "SECRET"), now=now)
    request = AWSRequest(method="PUT", url="https://lmcache.s3.t.test/obj%40x")
    from botocore.config import Config

    # LMCache's awscrt client sends UNSIGNED-PAYLOAD; ask botocore for the same
    request.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    S3SigV4Auth(BotoCredentials("AKID", "SECRET"), "s3", "default").add_auth(request)
    assert request.headers["X-Amz-Content-SHA256"] == "UNSIGNED-PAYLOAD"
    assert ours["Authorization"] == request.headers["Authorization"]


def test_credentials_repr_hides_secret() -> None:
    assert "SECRET" not in repr(Credentials("AKIDXXXX", "SECRET"))


def test_exec_argv_undoes_systemd_quoting() -> None:
    unit = ("[Service]\nExecStart=/opt/vllm/bin/vllm serve Qwen/Qwen3-8B \\\n"
            "    --kv-transfer-config '{\"kv_connector\":\"LMCacheConnectorV1\"}' \\\n"
            "    --x 100%%\nRestart=always\n")
    assert exec_argv(unit) == ["/opt/vllm/bin/vllm", "serve", "Qwen/Qwen3-8B",
                               "--kv-transfer-config", '{"kv_connector":"LMCacheConnectorV1"}',
                               "--x", "100%"]


def test_lifecycle_xml_parsed_like_boto3() -> None:
    xml = (b'<LifecycleConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Rule>'
           b"<ID>r</ID><Prefix></Prefix><Status>Enabled</Status><Expiration><Days>1</Days>"
           b"</Expiration><AbortIncompleteMultipartUpload><DaysAfterInitiation>1"
           b"</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>"
           b"</LifecycleConfiguration>")
    assert parse_lifecycle(xml) == [{"ID": "r", "Prefix": "", "Status": "Enabled",
                                     "Expiration": {"Days": 1},
                                     "AbortIncompleteMultipartUpload":
                                         {"DaysAfterInitiation": 1}}]


def test_doctor_maps_known_symptoms() -> None:
    assert "s3-credentials-valid" in diagnose("HTTP 401 Unauthorized from RGW")[0][1]
    assert "lmcache-fleet-consistent" in diagnose("low hit rate across replicas")[0][1]
    assert "vllm-connector-name" in diagnose("error reading choices for kv_connector")[0][1]
    assert "dns-answer-count" in diagnose("local proxy failed")[0][1]
    assert "s3-tls-certificate" in diagnose("AWS_IO_TLS_ERROR_NEGOTIATION_FAILURE: certificate"
                                            " verify failed")[0][1]
    assert diagnose("the coffee machine is broken") == []
