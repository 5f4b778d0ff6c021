"""The edit workload (issue 22): agent-like repeated edits, where suffix drafting should shine.

    python benchmarks/edits/generate.py [--seed 0] [--out benchmarks/edits/question.jsonl]

Twelve small documents, six Python modules (``edit_code``) and six texts (``edit_doc``: a README
section, meeting notes, a YAML config, a changelog, a runbook, an API reference), are each rewritten
over ``TURNS`` turns. A turn's prompt asks for one small edit (rename an identifier everywhere, add a
parameter, change a constant, fix a date, add a bullet, ...) of the document it carries, which is the
document after the earlier turns' edits, applied here by ``apply``: the answer is the prompt's
document copied back with a few lines changed, as an agent's next turn would carry its previous
output. Names, constants and the edits come from the seed; the rows are Spec-Bench questions
(``question_id``, ``category``, ``turns`` with one prompt) plus ``source`` (the document) and
``turn`` (its index in the edit chain).
"""

from __future__ import annotations

import argparse
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

TURNS = 2
FIRST_ID = 10001
MAX_CHARS = 1500  # the bundled model's context is small and the CPU slow
OUT = Path(__file__).parent / "question.jsonl"


@dataclass(frozen=True)
class Edit:
    """One requested change: each (old, new) of ``subs`` in turn, ``old`` found exactly once, or
    ``everywhere`` as a whole word (a rename)."""

    instruction: str
    subs: tuple[tuple[str, str], ...]
    everywhere: bool = False


@dataclass(frozen=True)
class Source:
    name: str  # the file name: the rows' ``source``
    category: str
    lang: str  # the fence's language
    text: str
    edits: tuple[Edit, ...]  # the candidates a chain draws from


def apply(text: str, edit: Edit) -> str:
    """``text`` with ``edit`` made; a ValueError if an ``old`` is missing (or, not ``everywhere``,
    found more than once)."""
    for old, new in edit.subs:
        pattern = rf"\b{re.escape(old)}\b" if edit.everywhere else re.escape(old)
        n = len(re.findall(pattern, text))
        if n == 0 or (n > 1 and not edit.everywhere):
            raise ValueError(f"{old!r} occurs {n} times in the document")
        text = re.sub(pattern, lambda _: new, text)
    return text


def other(rng: random.Random, pool: list, current):
    """A choice from ``pool`` other than ``current``."""
    return rng.choice([x for x in pool if x != current])


def after(anchor: str, line: str) -> tuple[str, str]:
    """The substitution that inserts ``line`` after the line ``anchor``."""
    return anchor + "\n", anchor + "\n" + line + "\n"


def render(template: str, v: dict) -> str:
    return Template(template.lstrip("\n")).substitute(v)


RATE_LIMITER = '''
"""Rate limiting for calls to the $service."""

import time

DEFAULT_RATE = $rate


class $cls:
    """Allow up to `capacity` calls, refilled at `rate` per second."""

    def __init__(self, rate=DEFAULT_RATE, capacity=$capacity):
        self.rate = rate
        self.capacity = capacity
        self.tokens = capacity
        self.updated = time.monotonic()

    def _refill(self):
        now = time.monotonic()
        elapsed = now - self.updated
        self.tokens = min(self.capacity, self.tokens + elapsed * self.rate)
        self.updated = now

    def $allow(self, cost=1):
        self._refill()
        if self.tokens < cost:
            return False
        self.tokens -= cost
        return True

    def wait_time(self, cost=1):
        self._refill()
        return max(0.0, cost - self.tokens) / self.rate


def limited(func, limiter: $cls):
    def wrapper(*args, **kwargs):
        if not limiter.$allow():
            raise RuntimeError("rate limit exceeded")
        return func(*args, **kwargs)
    return wrapper
'''


def rate_limiter(rng: random.Random) -> Source:
    v = dict(service=rng.choice(["search API", "payment gateway", "geocoder", "mail relay"]),
             rate=rng.choice([5, 10, 20]), capacity=rng.choice([10, 20, 50]),
             cls=rng.choice(["TokenBucket", "RateLimiter", "Throttle"]),
             allow=rng.choice(["allow", "try_acquire", "consume"]))
    allow = other(rng, ["allow", "try_acquire", "consume", "take"], v["allow"])
    rate = other(rng, [2, 5, 10, 20, 25], v["rate"])
    edits = (
        Edit(f"Rename the method `{v['allow']}` to `{allow}` everywhere.", ((v["allow"], allow),), everywhere=True),
        Edit(f"Change `DEFAULT_RATE` from {v['rate']} to {rate}.",
             ((f"DEFAULT_RATE = {v['rate']}", f"DEFAULT_RATE = {rate}"),)),
        Edit("Log a warning with the module's logger (`log = logging.getLogger(__name__)`) before raising "
             "the rate limit error.",
             (("import time\n", "import logging\nimport time\n\nlog = logging.getLogger(__name__)\n"),
              after("        if not limiter." + v["allow"] + "():", '            log.warning("rate limit exceeded")'))),
        Edit("Add the docstring line \"Seconds until `cost` tokens are available.\" to `wait_time`.",
             (after("    def wait_time(self, cost=1):", '        """Seconds until `cost` tokens are available."""'),)),
    )
    return Source("rate_limiter.py", "edit_code", "python", render(RATE_LIMITER, v), edits)


INVENTORY = '''
"""Stock levels for a small $shop."""

from dataclasses import dataclass

LOW_STOCK = $low


@dataclass
class $Item:
    sku: str
    name: str
    price: float
    quantity: int = 0


class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, item: $Item) -> None:
        self.items[item.sku] = item

    def restock(self, sku, amount):
        self.items[sku].quantity += amount

    def remove(self, sku, amount=1):
        item = self.items[sku]
        if amount > item.quantity:
            raise ValueError(f"only {item.quantity} of {sku} left")
        item.quantity -= amount

    def total_value(self):
        return sum(i.price * i.quantity for i in self.items.values())

    def low_stock(self):
        return [i for i in self.items.values() if i.quantity < LOW_STOCK]
'''


def inventory(rng: random.Random) -> Source:
    v = dict(shop=rng.choice(["bookshop", "bakery", "hardware store", "bike shop"]), low=rng.choice([3, 5, 10]),
             Item=rng.choice(["Item", "Product", "Part"]))
    item, low = other(rng, ["Item", "Product", "Part", "StockItem"], v["Item"]), other(rng, [2, 3, 5, 8, 10], v["low"])
    field, kind, default = rng.choice([("category", "str", '"general"'), ("supplier", "str", '""'),
                                       ("weight_kg", "float", "0.0")])
    edits = (
        Edit(f"Rename the class `{v['Item']}` to `{item}` everywhere.", ((v["Item"], item),), everywhere=True),
        Edit(f"Change `LOW_STOCK` from {v['low']} to {low}.", ((f"LOW_STOCK = {v['low']}", f"LOW_STOCK = {low}"),)),
        Edit("Give `low_stock` a parameter `threshold` that defaults to `LOW_STOCK` and use it.",
             (("def low_stock(self):", "def low_stock(self, threshold=LOW_STOCK):"),
              ("i.quantity < LOW_STOCK]", "i.quantity < threshold]"))),
        Edit(f"Add a field `{field}: {kind}` with the default {default} after `price`.",
             (after("    price: float", f"    {field}: {kind} = {default}"),)),
        Edit("Add the docstring line \"Add `amount` units of `sku` to the stock.\" to `restock`.",
             (after("    def restock(self, sku, amount):", '        """Add `amount` units of `sku` to the stock."""'),)),
    )
    return Source("inventory.py", "edit_code", "python", render(INVENTORY, v), edits)


CSV_REPORT = r'''
"""Summaries of $what exported as CSV."""

import csv
from statistics import mean

DELIMITER = "$delim"


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter=DELIMITER))


def column(rows, name):
    return [float(r[name]) for r in rows if r[name]]


def $summarize(rows, name):
    values = column(rows, name)
    return {
        "count": len(values),
        "mean": round(mean(values), $digits),
        "min": min(values),
        "max": max(values),
    }


def format_report(title, summary):
    lines = [title, "-" * len(title)]
    for key, value in summary.items():
        lines.append(f"{key:>8}: {value}")
    return "\n".join(lines)


def main(path, name):
    rows = read_rows(path)
    print(format_report(name, $summarize(rows, name)))
'''


def csv_report(rng: random.Random) -> Source:
    v = dict(what=rng.choice(["sales", "sensor readings", "survey answers", "invoices"]),
             delim=rng.choice([",", ";", "|"]), digits=rng.choice([1, 2, 3]),
             summarize=rng.choice(["summarize", "describe", "stats"]))
    name = other(rng, ["summarize", "describe", "stats", "summary_of"], v["summarize"])
    delim = other(rng, [",", ";", "|", "\\t"], v["delim"])
    edits = (
        Edit(f"Rename the function `{v['summarize']}` to `{name}` everywhere.", ((v["summarize"], name),),
             everywhere=True),
        Edit(f"Change `DELIMITER` to \"{delim}\".", ((f'DELIMITER = "{v["delim"]}"', f'DELIMITER = "{delim}"'),)),
        Edit("Add the median of the values to the summary, after the mean.",
             (("from statistics import mean\n", "from statistics import mean, median\n"),
              after(f'        "mean": round(mean(values), {v["digits"]}),', '        "median": median(values),'))),
        Edit("Give `read_rows` a parameter `encoding` that defaults to \"utf-8\" and pass it to `open`.",
             (("def read_rows(path):", 'def read_rows(path, encoding="utf-8"):'),
              ('open(path, newline="")', 'open(path, newline="", encoding=encoding)'))),
    )
    return Source("csv_report.py", "edit_code", "python", render(CSV_REPORT, v), edits)


RETRY = '''
"""Retrying flaky calls to the $service."""

import random
import time

MAX_DELAY = $max_delay


class RetryError(Exception):
    def __init__(self, attempts, last):
        super().__init__(f"gave up after {attempts} attempts: {last}")
        self.attempts = attempts
        self.last = last


def backoff(attempt, base=$base):
    delay = min(MAX_DELAY, base * 2 ** attempt)
    return delay * random.uniform(0.5, 1.0)


def $retry(func, attempts=$attempts, exceptions=(OSError,)):
    last = None
    for attempt in range(attempts):
        try:
            return func()
        except exceptions as exc:
            last = exc
            time.sleep(backoff(attempt))
    raise RetryError(attempts, last)


def fetch_status(client, job_id):
    return $retry(lambda: client.get(f"/jobs/{job_id}"))
'''


def retry(rng: random.Random) -> Source:
    v = dict(service=rng.choice(["build server", "object store", "billing API", "search index"]),
             max_delay=rng.choice([10.0, 30.0, 60.0]), base=rng.choice([0.1, 0.25, 0.5]),
             attempts=rng.choice([3, 4, 5]), retry=rng.choice(["with_retries", "retry_call", "call_with_retry"]))
    name = other(rng, ["with_retries", "retry_call", "call_with_retry", "retrying"], v["retry"])
    max_delay, attempts = other(rng, [5.0, 10.0, 30.0, 60.0], v["max_delay"]), other(rng, [2, 3, 4, 5, 6], v["attempts"])
    edits = (
        Edit(f"Rename the function `{v['retry']}` to `{name}` everywhere.", ((v["retry"], name),), everywhere=True),
        Edit(f"Change `MAX_DELAY` from {v['max_delay']} to {max_delay}.",
             ((f"MAX_DELAY = {v['max_delay']}", f"MAX_DELAY = {max_delay}"),)),
        Edit("Log each failed attempt with a module logger (`log = logging.getLogger(__name__)`).",
             (("import random\n", "import logging\nimport random\n"),
              ("import time\n", "import time\n\nlog = logging.getLogger(__name__)\n"),
              after("            last = exc", '            log.warning("attempt %d failed: %s", attempt + 1, exc)'))),
        Edit(f"Change the default number of attempts from {v['attempts']} to {attempts}.",
             ((f"attempts={v['attempts']}, exceptions", f"attempts={attempts}, exceptions"),)),
        Edit("Add the docstring line \"Seconds to wait before retry number `attempt`.\" to `backoff`.",
             (after(f"def backoff(attempt, base={v['base']}):", '    """Seconds to wait before retry number `attempt`."""'),)),
    )
    return Source("retry.py", "edit_code", "python", render(RETRY, v), edits)


TEXT_STATS = '''
"""Word statistics for $docs."""

import re
from collections import Counter

WORDS_PER_MINUTE = $wpm
STOPWORDS = {"the", "a", "an", "and", "of", "to", "in"}


def words(text):
    return re.findall(r"[a-z']+", text.lower())


def $counts(text):
    return Counter(w for w in words(text) if w not in STOPWORDS)


def top_words(text, n=$n):
    return [w for w, _ in $counts(text).most_common(n)]


def reading_time(text):
    minutes = len(words(text)) / WORDS_PER_MINUTE
    return max(1, round(minutes))


def summary(text):
    return {
        "words": len(words(text)),
        "top": top_words(text),
        "minutes": reading_time(text),
    }
'''


def text_stats(rng: random.Random) -> Source:
    v = dict(docs=rng.choice(["blog posts", "support tickets", "release notes", "essays"]),
             wpm=rng.choice([180, 200, 250]), n=rng.choice([5, 10, 20]),
             counts=rng.choice(["word_counts", "count_words", "frequencies"]))
    name = other(rng, ["word_counts", "count_words", "frequencies", "tally"], v["counts"])
    wpm = other(rng, [150, 180, 200, 230, 250], v["wpm"])
    stop = rng.choice(["is", "for", "on", "with"])
    edits = (
        Edit(f"Rename the function `{v['counts']}` to `{name}` everywhere.", ((v["counts"], name),), everywhere=True),
        Edit(f"Change `WORDS_PER_MINUTE` from {v['wpm']} to {wpm}.",
             ((f"WORDS_PER_MINUTE = {v['wpm']}", f"WORDS_PER_MINUTE = {wpm}"),)),
        Edit(f'Add "{stop}" to `STOPWORDS`.', (('"in"}', f'"in", "{stop}"}}'),)),
        Edit("Add the number of sentences to `summary`, after the words.",
             (after('        "words": len(words(text)),', '        "sentences": len(re.findall(r"[.!?]+", text)),'),)),
        Edit("Give `reading_time` a parameter `wpm` that defaults to `WORDS_PER_MINUTE` and use it.",
             (("def reading_time(text):", "def reading_time(text, wpm=WORDS_PER_MINUTE):"),
              ("/ WORDS_PER_MINUTE\n", "/ wpm\n"))),
    )
    return Source("text_stats.py", "edit_code", "python", render(TEXT_STATS, v), edits)


LRU_CACHE = '''
"""A small least-recently-used cache for $what."""

from collections import OrderedDict

MAX_ITEMS = $max_items


class $Cache:
    def __init__(self, max_items=MAX_ITEMS):
        self.max_items = max_items
        self.data = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key, default=None):
        if key in self.data:
            self.hits += 1
            self.data.move_to_end(key)
            return self.data[key]
        self.misses += 1
        return default

    def put(self, key, value):
        self.data[key] = value
        self.data.move_to_end(key)
        if len(self.data) > self.max_items:
            self.data.popitem(last=False)

    def hit_rate(self):
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


_cache = $Cache()


def cached(key, compute):
    value = _cache.get(key)
    if value is None:
        value = compute()
        _cache.put(key, value)
    return value
'''


def lru_cache(rng: random.Random) -> Source:
    v = dict(what=rng.choice(["rendered pages", "user profiles", "exchange rates", "thumbnails"]),
             max_items=rng.choice([128, 256, 1024]), Cache=rng.choice(["LRUCache", "RecentCache", "BoundedCache"]))
    name = other(rng, ["LRUCache", "RecentCache", "BoundedCache", "LruStore"], v["Cache"])
    size = other(rng, [64, 128, 256, 512, 1024], v["max_items"])
    edits = (
        Edit(f"Rename the class `{v['Cache']}` to `{name}` everywhere.", ((v["Cache"], name),), everywhere=True),
        Edit(f"Change `MAX_ITEMS` from {v['max_items']} to {size}.",
             ((f"MAX_ITEMS = {v['max_items']}", f"MAX_ITEMS = {size}"),)),
        Edit("Add a method `clear` after `hit_rate` that empties the cache and resets both counters.",
             (after("        return self.hits / total if total else 0.0",
                    "\n    def clear(self):\n        self.data.clear()\n        self.hits = self.misses = 0"),)),
        Edit("Add the docstring line \"Store `value`, evicting the oldest entry when full.\" to `put`.",
             (after("    def put(self, key, value):", '        """Store `value`, evicting the oldest entry when full."""'),)),
    )
    return Source("lru_cache.py", "edit_code", "python", render(LRU_CACHE, v), edits)


README = '''
## Installing $product

$product $version runs on Python $python or newer. Install it from the package index:

    pip install $pkg==$version

Then create a configuration file in your home folder:

    $pkg init --profile default

## Quick start

1. Start the local server with `$pkg serve`.
2. Open http://localhost:$port in a browser.
3. Sign in with the token printed by `$pkg token`.

## Getting help

- Read the FAQ at docs/faq.md.
- Ask questions in the #$pkg-users channel.
- Report bugs on the issue tracker.
'''


def readme(rng: random.Random) -> Source:
    products = ["Lumen", "Quillbox", "Tessera", "Harbor", "Beacon"]
    product = rng.choice(products)
    v = dict(product=product, pkg=product.lower(), version=f"{rng.randint(1, 3)}.{rng.randint(0, 9)}.{rng.randint(0, 5)}",
             python=rng.choice(["3.9", "3.10", "3.11"]), port=rng.choice([8000, 8080, 5000]))
    major, minor, patch = map(int, v["version"].split("."))
    new_version, port = f"{major}.{minor}.{patch + 1}", other(rng, [8000, 8080, 5000, 8888], v["port"])
    new_product = other(rng, products, product)
    edits = (
        Edit(f"Rename the product from {product} to {new_product} everywhere (keep the package name `{v['pkg']}`).",
             ((product, new_product),), everywhere=True),
        Edit(f"Update the version from {v['version']} to {new_version} everywhere.", ((v["version"], new_version),),
             everywhere=True),
        Edit(f"The server now listens on port {port}: fix the Quick start.", ((f"localhost:{v['port']}", f"localhost:{port}"),)),
        Edit("Add a fourth Quick start step: \"Stop the server with `Ctrl+C`.\"",
             (after(f"3. Sign in with the token printed by `{v['pkg']} token`.", "4. Stop the server with `Ctrl+C`."),)),
        Edit("Add a Getting help bullet after the FAQ one: \"Watch the video tutorials at docs/videos.md.\"",
             (after("- Read the FAQ at docs/faq.md.", "- Watch the video tutorials at docs/videos.md."),)),
    )
    return Source("README.md", "edit_doc", "markdown", render(README, v), edits)


NOTES = '''
# $team weekly sync, $date

Attendees: $a, $b, $c, $d

## Updates

- $a finished the migration of the billing jobs.
- $b is reviewing the new onboarding flow.
- The $system dashboard is back after the outage on $outage.

## Decisions

- Freeze the release branch on $freeze.
- Move the retro to Thursday.

## Action items

- [ ] $a: write the rollback plan.
- [ ] $c: update the on-call rota.
- [ ] $b: share the review notes by Friday.
'''


def notes(rng: random.Random) -> Source:
    a, b, c, d = rng.sample(["Ana", "Bilal", "Chen", "Dara", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jules"], 4)
    month = rng.choice(["March", "April", "May", "June"])
    day, freeze = rng.randint(3, 12), rng.randint(15, 26)
    v = dict(team=rng.choice(["Platform", "Payments", "Mobile", "Data"]), a=a, b=b, c=c, d=d,
             date=f"{month} {day}", outage=f"{month} {day - 2}", freeze=f"{month} {freeze}",
             system=rng.choice(["metrics", "alerts", "deploys"]))
    edits = (
        Edit(f"The meeting was on {month} {day + 1}, not {month} {day}: fix the title.",
             ((f"sync, {month} {day}\n", f"sync, {month} {day + 1}\n"),)),
        Edit(f"The release branch now freezes on {month} {freeze + 2}.",
             ((f"branch on {month} {freeze}.", f"branch on {month} {freeze + 2}."),)),
        Edit(f"Add an action item for {d}: book a room for the retro.",
             (after(f"- [ ] {c}: update the on-call rota.", f"- [ ] {d}: book a room for the retro."),)),
        Edit(f"Mark {a}'s action item as done.",
             ((f"- [ ] {a}: write the rollback plan.", f"- [x] {a}: write the rollback plan."),)),
    )
    return Source("meeting_notes.md", "edit_doc", "markdown", render(NOTES, v), edits)


CONFIG = '''
# $service configuration
service:
  name: $service
  environment: $env
  port: $port
  workers: $workers

database:
  host: db.$domain
  port: 5432
  name: $db
  pool_size: $pool
  timeout_seconds: 30

cache:
  enabled: true
  ttl_seconds: $ttl

logging:
  level: info
  format: json
  file: /var/log/$service.log

features:
  - search
  - export
'''


def config(rng: random.Random) -> Source:
    service = rng.choice(["orders", "catalog", "notifier", "ledger"])
    v = dict(service=service, env=rng.choice(["staging", "production"]), port=rng.choice([8000, 8080, 9000]),
             workers=rng.choice([2, 4, 8]), domain=rng.choice(["internal.example.com", "corp.example.net"]),
             db=f"{service}_db", pool=rng.choice([5, 10, 20]), ttl=rng.choice([60, 300, 900]))
    workers, feature = other(rng, [2, 4, 6, 8, 16], v["workers"]), rng.choice(["audit", "webhooks", "bulk_import"])
    edits = (
        Edit(f"Change the number of workers from {v['workers']} to {workers}.",
             ((f"  workers: {v['workers']}\n", f"  workers: {workers}\n"),)),
        Edit("Set the logging level to debug.", (("  level: info\n", "  level: debug\n"),)),
        Edit(f"Enable the `{feature}` feature (add it at the end of the list).", (after("  - export", f"  - {feature}"),)),
        Edit(f"Point the database at the replica `db-replica.{v['domain']}`.",
             ((f"  host: db.{v['domain']}\n", f"  host: db-replica.{v['domain']}\n"),)),
        Edit("Disable the cache.", (("  enabled: true\n", "  enabled: false\n"),)),
    )
    return Source("config.yaml", "edit_doc", "yaml", render(CONFIG, v), edits)


CHANGELOG = '''
# Changelog

## [$v3] - $d3

### Added
- Export of reports as $fmt.
- A `--dry-run` flag for the sync command.

### Fixed
- Crash when the config file is empty.

## [$v2] - $d2

### Changed
- Timeouts are now read from the config file.

### Fixed
- Wrong totals in the monthly summary.

## [$v1] - $d1

### Added
- First public release.
'''


def changelog(rng: random.Random) -> Source:
    major, minor, year = rng.randint(0, 2), rng.randint(2, 7), rng.choice([2023, 2024, 2025])
    months = sorted(rng.sample(range(1, 12), 3))
    v = dict(v1=f"{major}.{minor - 2}.0", v2=f"{major}.{minor - 1}.0", v3=f"{major}.{minor}.0",
             d1=f"{year}-{months[0]:02d}-14", d2=f"{year}-{months[1]:02d}-03", d3=f"{year}-{months[2]:02d}-21",
             fmt=rng.choice(["PDF", "CSV", "XLSX"]))
    fix = rng.choice(["Wrong time zone in the export file names.", "Slow start-up with many profiles.",
                      "The sync command ignoring `--quiet`."])
    edits = (
        Edit(f"Version {v['v3']} was released on {year}-{months[2]:02d}-22, not {v['d3']}: fix its date.",
             ((f"] - {v['d3']}\n", f"] - {year}-{months[2]:02d}-22\n"),)),
        Edit(f"Rename the release {v['v3']} to {major}.{minor}.1.", ((f"## [{v['v3']}]", f"## [{major}.{minor}.1]"),)),
        Edit(f"Add to the Fixed list of {v['v3']}: \"{fix}\"",
             (after("- Crash when the config file is empty.", f"- {fix}"),)),
        Edit("Add an Unreleased section at the top with one Added item: \"Dark mode for the web viewer.\"",
             (after("# Changelog", "\n## [Unreleased]\n\n### Added\n- Dark mode for the web viewer."),)),
    )
    return Source("CHANGELOG.md", "edit_doc", "markdown", render(CHANGELOG, v), edits)


RUNBOOK = '''
# Runbook: restarting $service

Owner: $owner (team $team)
Last reviewed: $reviewed

## When to use

Use this when the $service health check fails for more than $minutes minutes
or when the error rate on the dashboard goes above $rate%.

## Steps

1. Announce the restart in #ops.
2. Drain traffic: `svc drain $service --region $region`.
3. Restart the pods: `kubectl rollout restart deploy/$service`.
4. Wait until all pods are ready.
5. Undrain traffic: `svc undrain $service --region $region`.
6. Post the result in #ops.

## Escalation

Page the $team on-call if the restart does not help within 15 minutes.
'''


def runbook(rng: random.Random) -> Source:
    services = ["payments-api", "search-api", "auth-api", "media-api"]
    regions, owners = ["eu-west-1", "us-east-2", "ap-south-1"], ["Mira", "Tomas", "Yuki", "Omar"]
    v = dict(service=rng.choice(services), owner=rng.choice(owners), team=rng.choice(["SRE", "Core", "Infra"]),
             reviewed=f"2025-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}", minutes=rng.choice([5, 10]),
             rate=rng.choice([2, 5]), region=rng.choice(regions))
    owner, minutes, region = other(rng, owners, v["owner"]), v["minutes"] + 5, other(rng, regions, v["region"])
    service = other(rng, services, v["service"])
    edits = (
        Edit(f"{owner} now owns this runbook.", ((f"Owner: {v['owner']} ", f"Owner: {owner} "),)),
        Edit(f"Change the health check threshold from {v['minutes']} to {minutes} minutes.",
             ((f"more than {v['minutes']} minutes", f"more than {minutes} minutes"),)),
        Edit("Add a last step: \"Close the incident ticket.\"",
             (after("6. Post the result in #ops.", "7. Close the incident ticket."),)),
        Edit(f"The service moved: replace the region {v['region']} with {region} everywhere.",
             ((v["region"], region),), everywhere=True),
        Edit(f"Rename the service {v['service']} to {service} everywhere.", ((v["service"], service),), everywhere=True),
    )
    return Source("runbook.md", "edit_doc", "markdown", render(RUNBOOK, v), edits)


API = '''
# $api API v$major

Base URL: https://api.$domain/v$major
All requests need the header `Authorization: Bearer <token>`.
Responses are JSON. Rate limit: $limit requests per minute.

## Endpoints

- `GET /$res` lists $res, $page per page.
- `GET /$res/{id}` returns one $item.
- `POST /$res` creates a $item.
- `DELETE /$res/{id}` deletes a $item.

## Errors

- 400: the request body is not valid.
- 401: the token is missing or expired.
- 404: no $item with that id.
- 429: too many requests; retry after `Retry-After` seconds.
'''


def api(rng: random.Random) -> Source:
    item = rng.choice(["invoice", "ticket", "shipment", "booking"])
    v = dict(api=rng.choice(["Billing", "Helpdesk", "Logistics", "Reservations"]), major=rng.randint(1, 3),
             domain=rng.choice(["example.com", "example.org"]), limit=rng.choice([60, 100, 600]),
             res=item + "s", item=item, page=rng.choice([20, 50, 100]))
    limit, page = other(rng, [30, 60, 100, 300, 600], v["limit"]), other(rng, [10, 20, 25, 50, 100], v["page"])
    edits = (
        Edit(f"The rate limit is now {limit} requests per minute.",
             ((f"Rate limit: {v['limit']} requests", f"Rate limit: {limit} requests"),)),
        Edit(f"Document a `PATCH /{v['res']}/{{id}}` endpoint that updates a {item}, after POST.",
             (after(f"- `POST /{v['res']}` creates a {item}.", f"- `PATCH /{v['res']}/{{id}}` updates a {item}."),)),
        Edit(f"Lists now have {page} items per page.", ((f"{v['page']} per page", f"{page} per page"),)),
        Edit(f"Add the error 409 after 404: \"a {item} with that reference already exists.\"",
             (after(f"- 404: no {item} with that id.", f"- 409: a {item} with that reference already exists."),)),
        Edit(f"This is now version {v['major'] + 1} of the API: update v{v['major']} everywhere.",
             ((f"v{v['major']}", f"v{v['major'] + 1}"),), everywhere=True),
    )
    return Source("api_reference.md", "edit_doc", "markdown", render(API, v), edits)


SOURCES = (rate_limiter, inventory, csv_report, retry, text_stats, lru_cache,
           readme, notes, config, changelog, runbook, api)
ENDING = {"edit_code": "Return the full updated file.", "edit_doc": "Return the full updated document."}


def chains(seed: int = 0) -> list[tuple[Source, list[Edit]]]:
    """Each source with the ``TURNS`` edits the seed draws for it; a rename comes last, so that the
    other edits' snippets are still in the document."""
    rng = random.Random(seed)
    out = []
    for build in SOURCES:
        s = build(rng)
        out.append((s, sorted(rng.sample(s.edits, TURNS), key=lambda e: e.everywhere)))
    return out


def prompt(s: Source, edit: Edit, text: str) -> str:
    return f"{edit.instruction}\n\nThe current `{s.name}`:\n\n```{s.lang}\n{text}```\n\n{ENDING[s.category]}"


def rows(seed: int = 0) -> list[dict]:
    """The workload's questions: for each source, turn t asks for edit t of the document after edits
    0..t-1."""
    out = []
    for s, edits in chains(seed):
        text = s.text
        for t, edit in enumerate(edits):
            p = prompt(s, edit, text)
            if len(p) > MAX_CHARS:
                raise ValueError(f"{s.name} turn {t}: {len(p)} characters, over {MAX_CHARS}")
            out.append({"question_id": FIRST_ID + len(out), "category": s.category, "turns": [p],
                        "source": s.name, "turn": t})
            text = apply(text, edit)
    return out


def dumps(seed: int = 0) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows(seed))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args(argv)
    text = dumps(a.seed)
    Path(a.out).write_text(text, encoding="utf-8", newline="\n")
    print(f"{text.count(chr(10))} prompts -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
