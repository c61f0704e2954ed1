"""Four processes race to claim the same 200 work units; each unit gets exactly one owner.

Run: python examples/claim_race.py [URL]   (default: file:// in a temporary directory)

Every process opens its own handle on the mailbox, waits at a start barrier, and calls
``put_if_absent`` on every unit. The store decides each race; afterwards every unit is read
back to check that it has one winner, whose bytes are the ones stored.
"""

from __future__ import annotations

import sys
import tempfile

from gradientmail import from_url
from gradientmail.conformance import race_winners as race


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="gradientmail-demo-") as tmp:
        url = sys.argv[1] if len(sys.argv) > 1 else f"file://{tmp}"
        box = from_url(url)
        wins = race(box, racers=4, keys=200)
        print(f"4 racers raced for 200 units in {box.url}:")
        for name, won in sorted(wins.items()):
            print(f"  {name} won {len(won):3d} units")
        print("every unit has exactly one owner, and its stored value is its owner's")


if __name__ == "__main__":
    main()
