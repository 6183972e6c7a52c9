"""How wide a line of the report's text draws, without a font file at hand: the advance widths of DejaVu Sans (Book and
Bold), in thousandths of an em, read from the font's own `hmtx` table (Debian's fonts-dejavu-core,
/usr/share/fonts/truetype/dejavu/). DejaVu Sans is the page's `system-ui`/`sans-serif` on Debian and one of the widest
common sans-serif faces, so a label laid out by these widths fits where a narrower face draws it too."""

from __future__ import annotations

_FIRST = 32
"""The tables start at the space (U+0020) and run through `~` (U+007E)."""
_BOOK = (
    318, 401, 460, 838, 636, 950, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337, 636, 636, 636, 636, 636, 636, 636,
    636, 636, 636, 337, 337, 838, 838, 838, 531, 1000, 684, 686, 698, 770, 632, 575, 775, 752, 295, 295, 656, 557,
    863, 748, 787, 603, 787, 695, 635, 611, 732, 684, 989, 685, 611, 685, 390, 337, 390, 838, 500, 500, 613, 635,
    550, 635, 615, 352, 635, 634, 278, 278, 579, 278, 974, 634, 612, 635, 635, 411, 521, 392, 634, 592, 818, 592,
    592, 525, 636, 337, 636, 838)
_BOLD = (
    348, 456, 521, 838, 696, 1002, 872, 306, 457, 457, 523, 838, 380, 415, 380, 365, 696, 696, 696, 696, 696, 696,
    696, 696, 696, 696, 400, 400, 838, 838, 838, 580, 1000, 774, 762, 734, 830, 683, 683, 821, 837, 372, 372, 775,
    637, 995, 837, 850, 733, 850, 770, 720, 682, 812, 774, 1103, 771, 724, 725, 457, 365, 457, 838, 500, 500, 675,
    716, 593, 716, 678, 435, 716, 712, 343, 343, 665, 343, 1042, 712, 687, 716, 716, 493, 595, 478, 712, 652, 924,
    645, 652, 582, 712, 365, 712, 838)
_OTHER = {"…": 1000, "±": 838, "≤": 838, "≥": 838, "·": 380, "×": 838, "—": 1000, "–": 500, "µ": 736}
"""The few characters past ASCII the report writes; any other counts as a full em."""


def text_width(text: str, size: float, *, bold: bool = False) -> float:
    """The width in px of `text` set at `size` px."""
    table = _BOLD if bold else _BOOK
    units = 0
    for ch in text:
        code = ord(ch) - _FIRST
        units += table[code] if 0 <= code < len(table) else _OTHER.get(ch, 1000)
    return units * size / 1000
