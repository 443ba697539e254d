"""Cluster configs: load, validate and model them (`loader`: load and validate; `model`:
the typed result). Nothing is imported here: the providers' specs, which the loader asks,
import the model, so either may be imported first."""
