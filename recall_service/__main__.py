"""`python -m recall_service`."""

from recall_service.server import main

main()
