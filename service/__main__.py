from service.doors.cli import main

raise SystemExit(main())
