"""Which runs a report (and `syncswitch jobs`) calls the same job: the language model's text
counts, for it only."""

from __future__ import annotations

from types import SimpleNamespace

from syncswitch.reports.overview import job_of


def _job(**config):
    return dict(job_of(SimpleNamespace(config=config, timing="simulated")))  # type: ignore[arg-type]


def test_a_pysource_job_is_also_its_texts_size_and_checksum() -> None:
    base = {"dataset": "pysource", "pysource_bytes": 1_500_000, "corpus_sha256": "a" * 64}
    job = _job(**base)
    assert job["model"] == "char-transformer" and job["pysource_bytes"] == "1500000"
    assert _job(**{**base, "corpus_sha256": "b" * 64}) != job
    assert _job(**{**base, "pysource_bytes": 100_000}) != job


def test_other_jobs_ignore_the_pysource_settings() -> None:
    job = _job(dataset="mnist1d", mnist1d_samples=10_000, pysource_bytes=1_500_000)
    assert "pysource_bytes" not in job and "corpus_sha256" not in job
    assert job == _job(dataset="mnist1d", mnist1d_samples=10_000, pysource_bytes=100_000)


def test_jobs_names_a_pysource_jobs_text_by_its_checksum() -> None:
    from syncswitch.cli.jobs import _dataset

    job = {"dataset": "pysource", "corpus_sha256": "0123456789abcdef" * 4}
    assert _dataset(job) == "pysource (text 0123456789ab)"
    assert _dataset({"dataset": "mnist1d", "mnist1d_samples": 2000}) == "mnist1d (2000)"
