"""`--data s3://BUCKET/PREFIX` (and a scenario's `[dataset] source`): a bucket or prefix with a '.', '..' or empty
part, or a mirror folder that resolves outside the mirror base, is refused in one line before anything is
created or listed (it wrote and created folders above the mirror base)."""
from __future__ import annotations

import pytest

from harness import cli
from harness.data import bucket
from harness.data.bucket import MIRROR_ENV
from harness.errors import UsageError

HOSTILE = ("s3://evil/../../escaped", "s3://nosuchbucket/../../../made_before_listing", "s3://../x", "s3://./x",
           "s3://..", "s3://b//abs", "s3://b/a/./c", "s3://b/a//c")


@pytest.fixture
def base(tmp_path, monkeypatch):
    """The mirror base two folders deep in tmp_path, and an endpoint that refuses at once (nothing listens)."""
    monkeypatch.setenv(MIRROR_ENV, str(tmp_path / "a" / "mirror"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    return tmp_path / "a" / "mirror"


def files_under(path) -> set:
    return {p for p in path.rglob("*")}


@pytest.mark.parametrize("url", HOSTILE)
def test_a_bad_bucket_or_prefix_is_refused_before_anything_is_created(url, base, tmp_path):
    with pytest.raises(UsageError, match=rf"^--data {url.replace('.', '[.]')}: the (bucket|prefix) .* has the "
                                         r"part '[.]*' \(empty, '.' or '..'\).*s3://BUCKET/PREFIX\)$"):
        bucket.mirror(url)
    assert files_under(tmp_path) == set()


def test_a_link_in_the_mirror_base_that_leads_outside_is_refused(base, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    base.mkdir(parents=True)
    (base / "evil").symlink_to(outside)
    with pytest.raises(UsageError, match=r"the mirror folder .* outside the mirror base .*remove the link"):
        bucket.mirror("s3://evil/data")
    assert files_under(outside) == set()


def test_the_command_line_and_a_scenario_source_say_one_line_exit_2(base, tmp_path, capsys):
    url = "s3://evil/../../escaped"
    assert cli.main(["--scenario", "smoke", "--data", url, "--dry-run", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the prefix '../../escaped' has the part '..'" in err[0], err
    from harness.config import scenario

    text = scenario.resolve_path("smoke").read_text().replace("[dataset]\n", f'[dataset]\nsource = "{url}"\n', 1)
    (tmp_path / "s.toml").write_text(text)
    with pytest.raises(UsageError, match=r"the prefix '\.\./\.\./escaped' has the part '\.\.'"):
        scenario.load(str(tmp_path / "s.toml"))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["s.toml"]
