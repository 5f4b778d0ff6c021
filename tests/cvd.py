"""How a colour looks under the common colour-vision deficiencies, and how far apart two colours
look (CIELAB distance). Simulation: Machado, Oliveira & Fernandes (2009), severity 1.0, applied in
linear sRGB; the distance is CIE76 (about 2.3 is just noticeable; under 20 reads as "similar" at a
glance on a washed-out projector)."""

MACHADO = {  # Machado, Oliveira & Fernandes 2009, severity 1.0, linear RGB
    "normal": ((1, 0, 0), (0, 1, 0), (0, 0, 1)),
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216), (-0.003882, -0.048116, 1.051998)),
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413), (-0.011820, 0.042940, 0.968881)),
    "tritanopia": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602), (0.004733, 0.691367, 0.303900)),
}


def lin(c: float) -> float:
    """sRGB component (0..1) -> linear light."""
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def lab(rgb) -> tuple[float, float, float]:
    """Linear sRGB -> CIELAB (D65)."""
    r, g, b = rgb
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    f = [t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in (x, y, z)]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def seen(hexc: str, kind: str) -> tuple[float, float, float]:
    """CIELAB of a hex colour as seen with ``kind``."""
    rgb = [lin(int(hexc[i:i + 2], 16) / 255) for i in (1, 3, 5)]
    m = MACHADO[kind]
    return lab([max(0.0, min(1.0, sum(m[i][j] * rgb[j] for j in range(3)))) for i in range(3)])


def de(a: str, b: str, kind: str) -> float:
    """CIELAB distance of two hex colours as seen with ``kind`` (a key of MACHADO)."""
    return sum((x - y) ** 2 for x, y in zip(seen(a, kind), seen(b, kind))) ** 0.5
