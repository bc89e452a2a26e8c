"""One .eh_frame FDE decoded straight from its bytes: its address range and call-frame instructions.

cfi.LazyCfiTable decodes an FDE the first time a sampled address falls in its function. pyelftools'
reader builds every header field and instruction through its construct library, about 250 us per
FDE; a profile of a busy machine meets hundreds of new functions a second (every process's first
samples), which made those parses most of the unwinder's time. The format is small (the DWARF 4 call
frame section, .eh_frame's variant: LSB 3.0 and the x86-64 psABI), so it is read here with struct
and LEB128 loops, about 20 us per FDE. cfi.py runs the instructions either way; the whole-table path
(an object without .eh_frame_hdr, or .debug_frame) stays pyelftools'.

    fde = read_fde(stream, offset, vaddr_of_offset_0, cies)   # None: not an FDE, or garbage
    fde.start, fde.end, fde.cie, fde.instructions             # [(name, args)], e.g. ("def_cfa", (7, 8))

Names are those of DW_CFA_* without the prefix; args as pyelftools gives them (factored offsets left
unmultiplied). Every read is bounded by the entry's own length; malformed input raises ValueError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import IO

_U32 = struct.Struct("<I")
_PRIMARY = {1: "advance_loc", 2: "offset", 3: "restore"}  # the opcode's top two bits
# opcode -> (name, argument kinds): u = ULEB128, s = SLEB128, 1/2/4/8 = fixed-size unsigned,
# b = a ULEB128-sized block, a = an address in the FDE's pointer encoding
_EXTENDED = {
    0x00: ("nop", ""),
    0x01: ("set_loc", "a"),
    0x02: ("advance_loc1", "1"),
    0x03: ("advance_loc2", "2"),
    0x04: ("advance_loc4", "4"),
    0x05: ("offset_extended", "uu"),
    0x06: ("restore_extended", "u"),
    0x07: ("undefined", "u"),
    0x08: ("same_value", "u"),
    0x09: ("register", "uu"),
    0x0A: ("remember_state", ""),
    0x0B: ("restore_state", ""),
    0x0C: ("def_cfa", "uu"),
    0x0D: ("def_cfa_register", "u"),
    0x0E: ("def_cfa_offset", "u"),
    0x0F: ("def_cfa_expression", "b"),
    0x10: ("expression", "ub"),
    0x11: ("offset_extended_sf", "us"),
    0x12: ("def_cfa_sf", "us"),
    0x13: ("def_cfa_offset_sf", "s"),
    0x14: ("val_offset", "uu"),
    0x15: ("val_offset_sf", "us"),
    0x16: ("val_expression", "ub"),
    0x1D: ("MIPS_advance_loc8", "8"),
    0x2D: ("GNU_window_save", ""),
    0x2E: ("GNU_args_size", "u"),
    0x2F: ("GNU_negative_offset_extended", "uu"),
}
_FIXED = {"1": struct.Struct("<B"), "2": struct.Struct("<H"), "4": struct.Struct("<I"), "8": struct.Struct("<Q")}
# DW_EH_PE_* value formats (the low nibble): struct, or None for the LEB128 ones
_POINTER = {0x00: struct.Struct("<Q"), 0x02: struct.Struct("<H"), 0x03: struct.Struct("<I"), 0x04: struct.Struct("<Q"),
            0x0A: struct.Struct("<h"), 0x0B: struct.Struct("<i"), 0x0C: struct.Struct("<q"), 0x01: None, 0x09: None}
_PCREL, _OMIT = 0x10, 0xFF


@dataclass
class Cie:
    offset: int
    code_alignment_factor: int
    data_alignment_factor: int
    fde_encoding: int  # DW_EH_PE_* of the FDEs' pc_begin / pc_range ('R'; absptr without one)
    has_augmentation_data: bool  # 'z': each FDE carries a length-prefixed augmentation block
    instructions: list


@dataclass
class Fde:
    start: int
    end: int
    cie: Cie
    instructions: list


def _uleb(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]  # IndexError past the end: garbage
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def _sleb(data: bytes, pos: int) -> tuple[int, int]:
    value, end = _uleb(data, pos)
    bits = 7 * (end - pos)
    return (value - (1 << bits) if value & (1 << (bits - 1)) else value), end


def _pointer(data: bytes, pos: int, encoding: int, vaddr: int) -> tuple[int, int]:
    """A DW_EH_PE-encoded value at data[pos], pc-relative ones made absolute (`vaddr`: of data[0])."""
    fmt = encoding & 0x0F
    if fmt not in _POINTER or encoding & 0x70 not in (0, _PCREL):
        raise ValueError(f"pointer encoding 0x{encoding:x}")
    codec = _POINTER[fmt]
    if codec is None:
        value, end = (_uleb if fmt == 0x01 else _sleb)(data, pos)
    else:
        value, end = codec.unpack_from(data, pos)[0], pos + codec.size
    if encoding & 0x70 == _PCREL:
        value = (value + vaddr + pos) & 0xFFFFFFFFFFFFFFFF
    return value, end


def _instructions(data: bytes, pos: int, end: int, encoding: int, vaddr: int) -> list:
    out = []
    while pos < end:
        op = data[pos]
        pos += 1
        if op >= 0x40:
            name, low = _PRIMARY[op >> 6], op & 0x3F
            if name == "offset":
                value, pos = _uleb(data, pos)
                out.append((name, (low, value)))
            else:
                out.append((name, (low,)))
            continue
        name, kinds = _EXTENDED.get(op, (None, ""))
        if name is None:
            raise ValueError(f"call frame opcode 0x{op:x}")
        args = []
        for kind in kinds:
            if kind == "u":
                value, pos = _uleb(data, pos)
            elif kind == "s":
                value, pos = _sleb(data, pos)
            elif kind == "b":
                size, pos = _uleb(data, pos)
                value, pos = data[pos : pos + size], pos + size
            elif kind == "a":
                value, pos = _pointer(data, pos, encoding, vaddr)
            else:
                value, pos = _FIXED[kind].unpack_from(data, pos)[0], pos + _FIXED[kind].size
            args.append(value)
        if pos > end:
            raise ValueError("instruction runs past its entry")
        out.append((name, tuple(args)))
    return out


def _entry(stream: IO[bytes], offset: int) -> tuple[bytes, int]:
    """(the entry's bytes after its length field, their stream offset)."""
    stream.seek(offset)
    head = stream.read(4)
    if len(head) < 4:
        raise ValueError("entry past the section's end")
    length, at = _U32.unpack(head)[0], offset + 4
    if length == 0xFFFFFFFF:
        raise ValueError("64-bit DWARF entry")  # never written for x86-64 .eh_frame
    data = stream.read(length)
    if len(data) < length or length < 4:
        raise ValueError("truncated entry")
    return data, at


def _cie(stream: IO[bytes], offset: int, base: int) -> Cie:
    data, at = _entry(stream, offset)
    if _U32.unpack_from(data)[0] != 0:
        raise ValueError("not a CIE")
    version = data[4]
    nul = data.index(b"\0", 5)
    augmentation, pos = data[5:nul], nul + 1
    if b"eh" in augmentation:
        pos += 8
    caf, pos = _uleb(data, pos)
    daf, pos = _sleb(data, pos)
    if version == 1:
        pos += 1  # return address register, one byte
    else:
        _, pos = _uleb(data, pos)
    encoding, has_z = 0, augmentation.startswith(b"z")
    if has_z:
        size, pos = _uleb(data, pos)
        aug_end, p = pos + size, pos
        for ch in augmentation[1:]:
            if ch == ord("R"):
                encoding, p = data[p], p + 1
            elif ch == ord("L"):
                p += 1
            elif ch == ord("P"):
                _, p = _pointer(data, p + 1, data[p] & 0x7F, base + at)  # indirect bit: only the value's size matters
            elif ch not in b"SB":
                break  # an augmentation not known here: its data is skipped whole below
        pos = aug_end
    return Cie(offset, caf, daf, encoding, has_z, _instructions(data, pos, len(data), encoding, base + at))


def read_fde(stream: IO[bytes], offset: int, base: int, cies: dict[int, Cie]) -> Fde | None:
    """The FDE at `offset` of `stream` (a file or bytes positioned so that offset + base is the
    entry's vaddr), its CIE from `cies` or read into it; None when the entry is a CIE. Raises
    ValueError, IndexError or struct.error on garbage."""
    data, at = _entry(stream, offset)
    cie_pointer = _U32.unpack_from(data)[0]
    if cie_pointer == 0:
        return None
    cie_offset = at - cie_pointer  # .eh_frame: back from the pointer field itself
    cie = cies.get(cie_offset)
    if cie is None:
        cie = cies[cie_offset] = _cie(stream, cie_offset, base)
    vaddr = base + at
    start, pos = _pointer(data, 4, cie.fde_encoding, vaddr)
    size, pos = _pointer(data, pos, cie.fde_encoding & 0x0F, vaddr)  # a length: the format, never pc-relative
    if cie.has_augmentation_data:
        aug, pos = _uleb(data, pos)
        pos += aug
    return Fde(start, start + size, cie, _instructions(data, pos, len(data), cie.fde_encoding, vaddr))
