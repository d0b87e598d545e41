"""gaptop: htop for GPU idle gaps. The `gaptop` command is the program; this package holds its
CUPTI collector (libgaptop_collector.so), which `gaptop run` finds here."""
