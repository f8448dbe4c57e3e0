"""fixtures/real-world is the public broker-written corpus the tests read: every file is the one its
manifest records (sha256), and nothing unrecorded lies there."""
import hashlib
import json

from conftest import REAL_WORLD, real_world_files


def test_every_file_matches_its_manifest_record():
    records = json.loads((REAL_WORLD / "manifest.json").read_text())
    saved = {r["saved_as"]: r for r in records if r["status"] == "saved"}
    on_disk = {str(p.relative_to(REAL_WORLD)) for p in real_world_files()}
    assert on_disk == set(saved)
    for rel, r in saved.items():
        data = (REAL_WORLD / rel).read_bytes()
        assert len(data) == r["size"], rel
        assert hashlib.sha256(data).hexdigest() == r["sha256"], rel
        assert r["repo"] and len(r["commit"]) == 40 and r["path"], rel


def test_provenance_readme_names_every_source():
    readme = (REAL_WORLD / "README.md").read_text()
    for r in json.loads((REAL_WORLD / "manifest.json").read_text()):
        assert f"https://github.com/{r['repo']}" in readme and r["commit"] in readme, r["repo"]
