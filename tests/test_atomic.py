from __future__ import annotations

import pytest

from attentived.atomic import write_folder, write_text


def test_all_files_arrive_together(tmp_path):
    def fill(tmp):
        (tmp / "a.json").write_text("{}")
        (tmp / "b.csv").write_text("x\n")

    written = write_folder(tmp_path / "out", fill)
    assert [p.name for p in written] == ["a.json", "b.csv"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.json", "b.csv"]


def test_a_failure_writes_nothing_and_keeps_older_files(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.json").write_text("old")

    def fill(tmp):
        (tmp / "a.json").write_text("new")
        raise RuntimeError("plot failed")

    with pytest.raises(RuntimeError):
        write_folder(out, fill)
    assert [p.name for p in out.iterdir()] == ["a.json"]
    assert (out / "a.json").read_text() == "old"


def test_write_text_replaces_the_file_whole(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")
    write_text(path, "new")
    assert path.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_write_text_that_fails_keeps_the_old_file(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        write_text(path, "half \ud800")  # fails once the temporary file is open
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["r.json"]
