"""When to switch: a BSP round's gradient statistics, the online rules, the offline search's
steps."""
