# SPDX-License-Identifier: MIT
"""The Python package's protocol layout (volrec/_protocol.py) against include/volrec/protocol.h:
every constant, every structure size, every field offset and type, both ways, by parsing the
header and by asking the C compiler."""
import ast
import operator
import re
import shutil
import subprocess

import pytest

from volrec import _protocol as proto

C_TYPES = {"uint8_t": "B", "uint16_t": "H", "uint32_t": "I", "uint64_t": "Q", "int32_t": "i",
           "int64_t": "q", "int16_t": "h", "int8_t": "b", "float": "f", "double": "d"}
C_SIZES = {"B": 1, "b": 1, "H": 2, "h": 2, "I": 4, "i": 4, "Q": 8, "q": 8, "f": 4, "d": 8}


# ---- a small reader of protocol.h -----------------------------------------------------------

def _strip_comments(text):
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


_OPS = {ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitOr: operator.or_,
        ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _eval(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, str)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    raise ValueError("unsupported expression %s" % ast.dump(node))


def c_value(expr):
    """The value of a protocol.h macro body: integer literals with suffixes, UINTn_C(),
    casts to fixed-width types, shifts, string literals."""
    expr = expr.strip()
    expr = re.sub(r"U?INT\d+_C\(", "(", expr)
    expr = re.sub(r"\(\s*u?int\d+_t\s*\)", "", expr)
    expr = re.sub(r"\b(0[xX][0-9A-Fa-f]+|\d+)[uUlL]+\b", r"\1", expr)
    return _eval(ast.parse(expr, mode="eval").body)


def parse_header(text):
    """{"constants": {name: value}, "structs": {name: (size, [(field, offset, code, count)])},
    "comment_offsets": {(struct, field): offset}, "dtype_sizes": {code: bytes},
    "asserts": [(struct, field or None, value)]} of the protocol header's text."""
    clean = _strip_comments(text)
    constants = {}
    for m in re.finditer(r"^#define\s+(VOLREC_\w+)[ \t]+(\S.*?)\s*$", clean, re.M):
        constants[m.group(1)] = c_value(m.group(2))
    for body in re.findall(r"\benum\s+\w+\s*\{(.*?)\}", clean, re.S):
        for m in re.finditer(r"(\w+)\s*=\s*([^,]+)", body):
            constants[m.group(1)] = c_value(m.group(2))
    structs, comment_offsets = {}, {}
    for m in re.finditer(r"\bstruct\s+(\w+)\s*\{(.*?)\};", text, re.S):
        name, fields, off, align = m.group(1), [], 0, 1
        for line in m.group(2).splitlines():
            f = re.match(r"\s*(\w+)\s+(\w+)(?:\[(\d+)\])?;\s*(?:/\*\s*(\d+))?", line)
            if not f:
                assert not line.strip() or line.strip().startswith(("/*", "*")), line
                continue
            code = C_TYPES[f.group(1)]
            size, count = C_SIZES[code], int(f.group(3) or 1)
            off = (off + size - 1) // size * size
            align = max(align, size)
            fields.append((f.group(2), off, code, count))
            if f.group(4) is not None:
                comment_offsets[(name, f.group(2))] = int(f.group(4))
            off += size * count
        structs[name] = ((off + align - 1) // align * align, fields)
    dtype_sizes = {constants[n]: int(s) for n, s in
                   re.findall(r"dtype\s*==\s*(VOLREC_DTYPE_\w+)\s*\?\s*(\d+)", clean)}
    asserts = [(m.group(2), m.group(3), int(m.group(4))) for m in re.finditer(
        r"_Static_assert\((sizeof|offsetof)\(struct (\w+)(?:, (\w+))?\) == (\d+)", clean)]
    return dict(constants=constants, structs=structs, comment_offsets=comment_offsets,
                dtype_sizes=dtype_sizes, asserts=asserts)


def mismatches(text):
    """Every difference between the header's text and the Python layout, as sentences."""
    p = parse_header(text)
    out = []
    c, py = p["constants"], proto.C_CONSTANTS
    for name in sorted(set(c) - set(py)):
        out.append("%s = %r in protocol.h has no Python counterpart" % (name, c[name]))
    for name in sorted(set(py) - set(c)):
        out.append("%s = %r in Python is not in protocol.h" % (name, py[name]))
    for name in sorted(set(c) & set(py)):
        if c[name] != py[name]:
            out.append("%s: protocol.h %r, Python %r" % (name, c[name], py[name]))
    if p["dtype_sizes"] != dict(proto.DTYPE_SIZES):
        out.append("volrec_dtype_size: protocol.h %r, Python %r"
                   % (p["dtype_sizes"], dict(proto.DTYPE_SIZES)))
    for lay in proto.LAYOUTS:
        if lay.c_name not in p["structs"]:
            out.append("struct %s is not in protocol.h" % lay.c_name)
            continue
        size, fields = p["structs"][lay.c_name]
        if size != lay.size:
            out.append("struct %s: %d bytes in protocol.h, %d in Python"
                       % (lay.c_name, size, lay.size))
        cf = {f[0]: f for f in fields}
        for f in lay.fields:
            if f.name not in cf:
                out.append("%s.%s is used in Python but not in protocol.h" % (lay.c_name, f.name))
                continue
            _, off, code, count = cf[f.name]
            # a byte array (uint8_t name[n]) is the Python code "<n>s"
            py = ((f.offset, "B", int(f.code[:-1])) if f.code.endswith("s")
                  else (f.offset, f.code, 1))
            if (off, code, count) != py:
                out.append("%s.%s: protocol.h offset %d type %s[%d], Python offset %d type %s"
                           % (lay.c_name, f.name, off, code, count, f.offset, f.code))
        for name, off, code, count in fields:
            if not name.startswith("reserved") and name not in lay.offset:
                out.append("%s.%s (offset %d) in protocol.h is missing from the Python layout"
                           % (lay.c_name, name, off))
    return out


@pytest.fixture(scope="module")
def header_text(src_dir):
    return (src_dir / "include/volrec/protocol.h").read_text()


# ---- the tests ------------------------------------------------------------------------------

def test_python_layout_matches_protocol_h(header_text):
    assert mismatches(header_text) == []


def test_the_reader_of_protocol_h_agrees_with_its_static_asserts_and_offset_comments(header_text):
    p = parse_header(header_text)
    assert len(p["asserts"]) >= 10 and len(p["constants"]) >= 25
    for struct_name, field, value in p["asserts"]:
        size, fields = p["structs"][struct_name]
        got = size if field is None else {f[0]: f[1] for f in fields}[field]
        assert got == value, (struct_name, field, got, value)
    for (struct_name, field), off in p["comment_offsets"].items():
        assert {f[0]: f[1] for f in p["structs"][struct_name][1]}[field] == off, \
            (struct_name, field, off)
    # every field of protocol.h states its offset in a comment, and all were compared
    assert len(p["comment_offsets"]) == sum(len(f) for _, f in p["structs"].values())


@pytest.mark.parametrize("change", [
    ("\tuint32_t nx;           /*  52 */", "\tuint16_t nx;           /*  52 */"),
    ("\tuint32_t slot_count;        /*  40", "\tuint16_t pad0, slot_count; /*  40"),
    ("#define VOLREC_MAX_SLOTS     64", "#define VOLREC_MAX_SLOTS     32"),
    ("#define VOLREC_VOL_MSG_MIN 112", "#define VOLREC_VOL_MSG_MIN 112\n#define VOLREC_NEW 1"),
    ("\tuint32_t flags;        /*  64 VOLREC_FLAG_* */\n\tuint32_t generation;",
     "\tuint32_t generation;\n\tuint32_t flags;"),
    ("\tdouble voxel_dy_um;    /* 120 */", "\tfloat voxel_dy_um, pad1;    /* 120 */"),
    ("\tuint32_t max_readers;      /* 116", "\tint32_t max_readers;      /* 116"),
    ("\tuint32_t reserved0;        /* 132 zero */\n\tuint64_t views_offset;",
     "\tuint32_t lost_volumes;\n\tuint64_t views_offset;"),
    ("\tfloat step;          /* 76", "\tdouble step;          /* 76"),
    ("VOLREC_STATE_CLOSED =", "VOLREC_STATE_CLOSING = 2, VOLREC_STATE_CLOSED ="),
])
def test_a_drift_of_either_side_is_reported(header_text, change):
    old, new = change
    assert old in header_text, "the test's pattern no longer occurs in protocol.h: %r" % old
    try:
        found = mismatches(header_text.replace(old, new, 1))
    except (AssertionError, KeyError, ValueError, SyntaxError):
        return  # the reader refuses what it does not understand: also a failure
    assert found, "changing %r to %r went unnoticed" % change


def test_a_python_side_drift_is_reported(header_text, monkeypatch):
    moved = proto.Layout(proto.SLOT_HEADER.c_name, proto.SLOT_HEADER.size,
                         [(f.name, f.offset - (8 if f.name == "epoch" else 0), f.code)
                          for f in proto.SLOT_HEADER.fields if f.name != "volume_id"])
    monkeypatch.setattr(proto, "LAYOUTS", (moved,))
    found = mismatches(header_text)
    assert any("epoch" in m for m in found) and any("volume_id" in m for m in found), found
    monkeypatch.setattr(proto, "C_CONSTANTS", dict(proto.C_CONSTANTS, VOLREC_MAX_READERS=512))
    assert any("VOLREC_MAX_READERS" in m for m in mismatches(header_text))


def test_layout_prefixes_fit_what_readers_may_read():
    for lay in proto.LAYOUTS:
        assert lay.prefix <= lay.size, lay.c_name
    body = proto.VOL_MSG.pack(magic=proto.VOL_MAGIC, major=proto.PROTO_MAJOR, size=160, slot=3,
                              session_id=7,
                              sequence=9, ny=2, nx=3, nz=4, dtype=2, offset_x=-1,
                              generation=5, voxel_dx_um=10.0, voxel_dz_um=3.1)
    m = proto.decode_vol(body)
    assert (m["slot"], m["sequence"], m["offset_x"], m["nz"]) == (3, 9, -1, 4)
    assert m["generation"] == 5 and proto.voxel_size(m) == (10.0, None, 3.1)


def test_a_vol_message_of_an_older_writer_reads_its_new_fields_as_unknown():
    # a body shorter than this minor's (as 1.2 sent 128 bytes): no generation, no voxel size
    # (zero, i.e. unknown)
    body = proto.VOL_MSG.pack(magic=proto.VOL_MAGIC, major=proto.PROTO_MAJOR, size=128, slot=3,
                              session_id=7, sequence=9, ny=2, nx=3, nz=4, dtype=1)[:128]
    m = proto.decode_vol(body)
    assert m["generation"] == 0 and proto.voxel_size(m) == (None, None, None)
    # the smallest body readers accept
    small = body[:proto.VOL_MSG_MIN]
    small = small[:8] + (proto.VOL_MSG_MIN).to_bytes(4, "little") + small[12:]
    assert proto.decode_vol(small)["sequence"] == 9
    # a writer of another major, older or newer, is refused with a message naming both
    for major in (1, 3):
        other = bytearray(body)
        other[4:6] = (major).to_bytes(2, "little")
        with pytest.raises(proto.ProtocolError,
                           match=r"major version %d; this client supports 2 only \(protocol "
                                 r"2\.%d\): volrecd and its clients must be of the same major "
                                 r"version" % (major, proto.PROTO_MINOR)):
            proto.decode_vol(bytes(other))
    # a voxel size that is no finite positive number is unknown, never passed on
    assert proto.voxel_size({"voxel_dx_um": float("nan"), "voxel_dy_um": -1.0,
                             "voxel_dz_um": float("inf")}) == (None, None, None)


@pytest.mark.skipif(not shutil.which("cc"), reason="no C compiler")
def test_the_c_compiler_agrees_with_the_python_layout(src_dir, tmp_path):
    lines = ["#include <stdio.h>", "#include <inttypes.h>", '#include "volrec/protocol.h"',
             "int main(void)", "{"]
    expect = []
    for lay in proto.LAYOUTS:
        lines.append('printf("%%zu\\n", sizeof(struct %s));' % lay.c_name)
        expect.append(str(lay.size))
        for f in lay.fields:
            if f.code.endswith("s"):  # a byte array: unsigned, no sign to test
                lines.append('printf("%%zu %%zu 0\\n", offsetof(struct %s, %s), '
                             'sizeof(((struct %s *)0)->%s));'
                             % (lay.c_name, f.name, lay.c_name, f.name))
                expect.append("%d %d 0" % (f.offset, f.size))
                continue
            lines.append('printf("%%zu %%zu %%d\\n", offsetof(struct %s, %s), '
                         'sizeof(((struct %s *)0)->%s), (int)((__typeof__(((struct %s *)0)->%s))-1 < 0));'
                         % (lay.c_name, f.name, lay.c_name, f.name, lay.c_name, f.name))
            expect.append("%d %d %d" % (f.offset, f.size, f.code.islower()))
    for name, value in sorted(proto.C_CONSTANTS.items()):
        if isinstance(value, str):
            lines.append('printf("%%s\\n", %s);' % name)
            expect.append(value)
        else:
            lines.append('printf("%%" PRIu64 "\\n", (uint64_t)(%s));' % name)
            expect.append(str(value))
    for code, size in sorted(proto.DTYPE_SIZES.items()):
        lines.append('printf("%%zu\\n", volrec_dtype_size(%d));' % code)
        expect.append(str(size))
    lines += ["return 0;", "}"]
    (tmp_path / "layout.c").write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Werror", "-I",
                    str(src_dir / "include"), "-o", str(exe), str(tmp_path / "layout.c")],
                   check=True, capture_output=True, text=True)
    got = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    assert got.splitlines() == expect

