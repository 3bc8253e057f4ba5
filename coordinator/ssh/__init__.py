"""Agents pushed onto hosts over SSH: the pure plan of what an install means for a host
(install.py) and the session that carries it out (session.py)."""
