from appliance.replay import main

raise SystemExit(main())
