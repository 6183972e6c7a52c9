"""Metric families declared once, for the custom collectors (health, canary, memory watchdog, fabric).

A collector lists its fixed families (`FAMILIES`); `describe()` yields them empty, so prometheus-client's registry
knows every name at register time and refuses a second collector of the same series ("Duplicated timeseries"),
and `collect()` builds each from the same declaration, so a name, a help text or a label set cannot differ
between the two. A family a collector leaves out at a scrape (no reading yet) is still declared.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector


@dataclass(frozen=True)
class Family:
    kind: Literal["gauge", "counter", "info"]
    name: str
    help: str
    labels: tuple[str, ...] = ()

    def new(self, value: float | None = None) -> GaugeMetricFamily | CounterMetricFamily:
        """An empty family to add samples to (labelled), or one holding `value` (unlabelled)."""
        cls = GaugeMetricFamily if self.kind == "gauge" else CounterMetricFamily
        if value is not None:
            return cls(self.name, self.help, value=value)
        return cls(self.name, self.help, labels=list(self.labels))

    def info(self, value: Mapping[str, str]) -> InfoMetricFamily:
        return InfoMetricFamily(self.name, self.help, value=dict(value))

    def empty(self) -> Metric:
        if self.kind == "info":
            return InfoMetricFamily(self.name, self.help, labels=list(self.labels))
        return self.new()


class DescribedCollector(Collector):
    """A collector whose families are fixed: `describe()` names them all (none is ever [])."""

    FAMILIES: ClassVar[tuple[Family, ...]] = ()

    def describe(self) -> Iterator[Metric]:
        for family in self.FAMILIES:
            yield family.empty()
