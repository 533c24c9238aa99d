"""The structs the caller fills (pl_engine_config, pl_sampling_params, pl_chat_options),
without mirroring them: the library says how big each is (pl_*_struct_size), defaults it
(pl_*_init), and every field is set by name from JSON (pl_*_set_json), which checks the
range and names the field in its message. The field tables (pl_*_fields) say which names
exist, their kinds and their enum choices."""
from __future__ import annotations

import ctypes
import json
from ctypes import c_double, c_size_t
from typing import Any, Dict, List, Optional

from . import _lib

# pl_field_kind (pagellm.h), for the kinds the binding treats apart
KIND_NAMES = ["BOOL", "INT", "U64", "SIZE", "DOUBLE", "FLOAT", "STRING", "ENUM", "IDS",
              "STRINGS", "OPT_U64", "BIAS"]


class FieldInfo:
    """One row of a field table: name, kind, range, enum choices, flag and help."""

    __slots__ = ("name", "kind", "choices", "min", "max", "flag", "help", "_row")

    def __init__(self, row: _lib.Field):
        self._row = row
        self.name: str = row.name.decode()
        self.kind: str = KIND_NAMES[row.kind]
        self.choices: Optional[List[str]] = None
        if row.choices:
            out, i = [], 0
            while row.choices[i]:
                out.append(row.choices[i].decode())
                i += 1
            self.choices = out
        self.min = row.range.min if row.range.is_set else None
        self.max = row.range.max if row.range.is_set else None
        self.flag = row.flag.decode() if row.flag else None
        self.help = row.help.decode() if row.help else ""

    def __repr__(self) -> str:
        return f"FieldInfo({self.name!r}, {self.kind})"


class Table:
    """One struct's functions and descriptors: 'engine_config', 'sampling_params' or
    'chat_options'."""

    def __init__(self, stem: str):
        L = _lib.lib()
        self.stem = stem
        self.size: int = getattr(L, f"pl_{stem}_struct_size")()
        self.init = getattr(L, f"pl_{stem}_init")
        self.deinit = getattr(L, f"pl_{stem}_deinit")
        self.set_text = getattr(L, f"pl_{stem}_set")
        self.set_json = getattr(L, f"pl_{stem}_set_json")
        n = c_size_t()
        rows = getattr(L, f"pl_{stem}_fields")(ctypes.byref(n))
        self.fields: Dict[str, FieldInfo] = {}
        for i in range(n.value):
            f = FieldInfo(rows[i])
            self.fields[f.name] = f
        # other names of fields (vLLM's), which the setters take too
        self.aliases: Dict[str, str] = {}
        get_aliases = getattr(L, f"pl_{stem}_aliases", None)
        if get_aliases is not None:
            rows = get_aliases(ctypes.byref(n))
            for i in range(n.value):
                self.aliases[rows[i].alias.decode()] = rows[i].name.decode()

    def field_name(self, name: str) -> Optional[str]:
        """The field name or alias names; None when neither."""
        return name if name in self.fields else self.aliases.get(name)

    def __contains__(self, name: str) -> bool:
        return self.field_name(name) is not None


_tables: Dict[str, Table] = {}


def table(stem: str) -> Table:
    t = _tables.get(stem)
    if t is None:
        t = _tables[stem] = Table(stem)
    return t


class CStruct:
    """A library-sized, library-defaulted struct whose fields are set by name. The copies the
    setters make live in the struct until close() (also on garbage collection)."""

    def __init__(self, stem: str):
        self.table = table(stem)
        words = (self.table.size + 7) // 8
        self._buf = (c_double * words)()  # a double's alignment covers every member
        self.table.init(self._buf, self.table.size)
        self._open = True

    @property
    def ptr(self) -> ctypes.Array:
        return self._buf

    def set(self, name: str, value: Any) -> None:
        """Sets a field from a Python value, sent as JSON (None is JSON null: unset)."""
        try:
            text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{self.table.stem}.{name}: {value!r} cannot be given ({e})")
        _lib.check(self.table.set_json(self._buf, name.encode(), text.encode()))

    def set_text(self, name: str, text: str) -> None:
        """Sets a field from text as a command line gives it (a STRING field: the text)."""
        _lib.check(self.table.set_text(self._buf, name.encode(), text.encode()))

    def get(self, name: str) -> Any:
        """A field's value, read back through pl_field_to_json."""
        f = self.table.fields[name]._row
        buf = ctypes.create_string_buffer(256)
        n = _lib.lib().pl_field_to_json(ctypes.byref(f), self._buf, buf, len(buf))
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            _lib.lib().pl_field_to_json(ctypes.byref(f), self._buf, buf, len(buf))
        return json.loads(buf.value.decode())

    def close(self) -> None:
        if self._open:
            self._open = False
            self.table.deinit(self._buf)

    def __enter__(self) -> "CStruct":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
