"""The autoscaler's actions: what carries out decide/'s decisions (launches through the
provider, stopping a noticed node's Ray, autostop)."""
