"""Flavours defined outside bench/launch/, for tests that register one and follow its facts through the layers."""
