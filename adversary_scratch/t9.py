from h import *
many([
 ("FN28 program global read after a call", "inventory = []\ndef add_item(x):\n    inventory.append(x)\n", A("add_item('apple')\nassert inventory == ['apple']"), "PASS"),
 ("FN28b global counter", "count = 0\ndef bump():\n    global count\n    count += 1\n", A("bump()\nbump()\nassert count == 2"), "PASS"),
])
