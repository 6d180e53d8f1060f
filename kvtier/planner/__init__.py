"""Capacity and cost planning: what each cache tier holds, how fast it loads, what it costs."""
