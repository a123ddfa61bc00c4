from evalbench.cli import main

raise SystemExit(main())
