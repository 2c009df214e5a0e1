"""The YDB Topic API (plus Discovery and Auth) served over ``vdl.net.grpc``."""
