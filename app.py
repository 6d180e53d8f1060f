"""CDK entry point (`cdk.json` runs it): everything happens in kvtier.app."""

import sys

from kvtier.app import main

sys.exit(main())
