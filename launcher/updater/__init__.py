"""Bring a node to the state its config describes: files, setup commands, Ray."""
