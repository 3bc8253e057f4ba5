"""Pure rules of the HTTP edge the server and API share (byte ranges, connection bounds, rate
limits, signed artifact links): no I/O, kept out of the domain because no business rule needs
them."""
