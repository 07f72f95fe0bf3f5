"""Discounts on order totals (all amounts are integer cents)."""


def apply_discount(total_cents: int, percent: int) -> int:
    """Price after a percentage discount, rounded down to whole cents."""
    if not 0 <= percent <= 100:
        raise ValueError(f"discount {percent}% is out of range")
    return total_cents * (100 - percent) // 100


def order_total(lines: list[tuple[int, int]], percent: int = 0) -> int:
    """Sum of quantity x unit price over the order lines, then the discount."""
    subtotal = sum(qty * unit for qty, unit in lines)
    return apply_discount(subtotal, percent)
