"""splitmix64 on Python integers (Steele, Lea, Flood 2014): the independent reference for the
counter-based rollout noise of ``soft_spatial.softthink.noise``, shared by its tests."""

MASK = 2 ** 64 - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(z: int) -> int:
    """splitmix64's output function."""
    z = (z + GOLDEN) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def uniform_bits(seed: int, step: int, n: int) -> list[int]:
    """U · 2^24 of ``noise_uniforms``: U[j] = (h(seed, step, j) >> 40) · 2^-24."""
    h = mix64(mix64(seed & MASK) ^ (step & MASK))
    return [mix64(h ^ j) >> 40 for j in range(n)]


def uniforms(seed: int, step: int, n: int) -> list[float]:
    """The uniforms of one row and step."""
    return [b / 2 ** 24 for b in uniform_bits(seed, step, n)]
