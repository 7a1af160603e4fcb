"""The precision of the biLM's products: the setting, its resolution per pass and device, ``auto``'s
measurements and recorded decisions, the FLOP count and the roofline they are judged against."""
