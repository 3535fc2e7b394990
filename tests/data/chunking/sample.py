"""A small module for the code chunker tests."""

import math

RATE = 0.2


def area(radius: float) -> float:
    """Area of a circle."""
    return math.pi * radius**2


class Parcel:
    """A parcel with items."""

    def __init__(self, items):
        self.items = list(items)

    def weight(self, unit: str = "kg") -> float:
        total = sum(item.weight for item in self.items)
        return total if unit == "kg" else total * 2.2046


async def fetch(url, *, timeout=10):
    return await client.get(url, timeout=timeout)
