"""Stragglers: emulated scenarios, the detector, the policies and the monitor that runs them."""
