"""Datasets: the typed :class:`Item` and streaming loaders for each supported format."""

from evalbench.core.items import Ambiguity, Conditions, FollowUp, Item, RecordError
from evalbench.dataset.loader import Dataset, DatasetScan, load_items

__all__ = ["Ambiguity", "Conditions", "Dataset", "DatasetScan", "FollowUp", "Item", "RecordError", "load_items"]
