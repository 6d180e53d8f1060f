"""CDK entry point (`cdk.json` runs it): everything happens in kvtier.app.main."""

import sys

from kvtier.app.main import main

sys.exit(main())
