"""Dialect: which characters separate and quote fields."""

from dataclasses import dataclass


class DialectError(ValueError):
    """Raised when a dialect cannot be used to read or write CSV."""


@dataclass(frozen=True)
class Dialect:
    delimiter: str = ","
    quotechar: str = '"'
    lineterminator: str = "\n"

    def validate(self) -> "Dialect":
        if len(self.delimiter) != 1:
            raise DialectError("delimiter must be a single character")
        if len(self.quotechar) != 1:
            raise DialectError("quotechar must be a single character")
        if self.delimiter == self.quotechar:
            raise DialectError("delimiter and quotechar must differ")
        if self.lineterminator not in ("\n", "\r\n"):
            raise DialectError("lineterminator must be \\n or \\r\\n")
        return self


EXCEL = Dialect()
TAB = Dialect(delimiter="\t")


def get_dialect(dialect: "Dialect | None") -> Dialect:
    """Return a validated dialect, defaulting to comma-separated values."""
    return (dialect or EXCEL).validate()
