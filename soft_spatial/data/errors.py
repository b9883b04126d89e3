"""The error type the data layer raises for bad benchmark files, and the warning it gives for a
record it leaves out."""

from __future__ import annotations

from os import PathLike


class DataFormatError(ValueError):
    """A benchmark file does not match its expected schema.

    The message always names the file, the record (its position and, when known, its id) and the
    field, so a bad item in a 7,000-record file can be found without a debugger.
    """

    def __init__(
        self,
        file: str | PathLike[str],
        message: str,
        *,
        index: int | None = None,
        record_id: str | None = None,
        field: str | None = None,
    ) -> None:
        self.file = str(file)
        self.index = index
        self.record_id = record_id
        self.field = field
        where = [self.file]
        if index is not None or record_id is not None:
            parts = []
            if index is not None:
                parts.append(f"index {index}")
            if record_id is not None:
                parts.append(f"id {record_id!r}")
            where.append("record " + ", ".join(parts))
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(": ".join([", ".join(where), message]))


class SkippedRecord(UserWarning):
    """A loader left one record out, and says which and why (``str(warning)``: file, record,
    field and the reason, as in `DataFormatError`). Given with `warnings.warn`, so a command that
    loads a benchmark sees each one on stderr, and the evaluation counts them in its summary."""

    def __init__(self, reason: DataFormatError) -> None:
        self.file, self.index, self.record_id, self.field = (reason.file, reason.index,
                                                             reason.record_id, reason.field)
        super().__init__(f"record left out: {reason}")
