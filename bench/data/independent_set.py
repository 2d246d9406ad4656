"""Paraphrase-heavy and conversation-heavy test sets, written independently of the tuning data.

Written by hand for issue 25, on topics that appear nowhere in semantic_bases.txt (so neither the
tune nor the test split of semantic_set.jsonl shares a question, a paraphrase or a trap with them),
before the guard's insertion rule was tuned, and never used to tune it: they are only reported.

- PARAPHRASES: a base question, free rewordings that the same answer serves (different structure,
  synonyms, added or dropped filler: what users actually type), and traps that need a different
  answer, most of them also reworded: `swap` (direction or roles), `neg`, `num`, `unit`, `ent`
  (another entity), `sib` (a sibling value), `qual` (a qualifier added or dropped), `scope`.
- CONVERSATIONS: one earlier exchange (user turn, assistant turn) and a follow-up. True repeats ask
  the follow-up again, reworded, after the same history or after a reworded first turn (the
  assistant turn then is the same text: that first turn was itself served from the cache). Traps
  keep the follow-up word for word (or reworded) and change the history's meaning (`history:KIND`),
  or keep the history and change the follow-up (`follow-up:KIND`).

Every pair is (a, b): `a` was cached, `b` is asked; `label` same | different.

    python bench/data/independent_set.py      # writes independent_set.jsonl beside this file
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "independent_set.jsonl"

# topic: [(base, [true rewordings], [(trap, kind)])]
PARAPHRASES: dict[str, list[tuple[str, list[str], list[tuple[str, str]]]]] = {
    "accounts": [
        ("How do I reset my password?",
         ["I forgot my password, how can I change it?", "What's the way to reset a forgotten password?",
          "Can you help me reset my password?", "Password reset: how does it work?"],
         [("How do I reset my PIN?", "sib"), ("How do I reset someone else's password?", "ent"),
          ("I remember my password, how do I stop being asked to reset it?", "neg")]),
        ("How do I turn on two-factor authentication?",
         ["How can I enable 2FA on my account?", "What are the steps to set up two-factor authentication?",
          "Where do I switch on two factor auth?"],
         [("How do I turn off two-factor authentication?", "neg"), ("How can I disable 2FA on my account?", "neg"),
          ("How do I turn on two-factor authentication for my whole team?", "scope")]),
        ("Why was my account locked?",
         ["What caused my account to be locked?", "My account got locked, why?", "Why is my account locked out?"],
         [("Why was my account deleted?", "sib"), ("Why was my account not locked?", "neg"),
          ("How do I unlock my account?", "sib")]),
        ("Can I change the email address on my account?",
         ["Is it possible to update my account's email?", "How do I use a different email for my account?",
          "Can I switch my account to a new email address?"],
         [("Can I change the phone number on my account?", "sib"), ("Can I add a second email address to my account?", "qual"),
          ("Can I change the email address on my child's account?", "ent")]),
    ],
    "coffee": [
        ("How much coffee should I use for 1 liter of water?",
         ["What's the right amount of coffee for a liter of water?", "How many grams of coffee per liter of water?",
          "For one litre of water, how much ground coffee do I need?"],
         [("How much coffee should I use for 2 liters of water?", "num"), ("How much coffee should I use for 1 cup of water?", "unit"),
          ("How much water should I use for 1 liter of coffee?", "swap")]),
        ("Does espresso have more caffeine than drip coffee?",
         ["Is there more caffeine in espresso than in drip coffee?", "Which has more caffeine, espresso or drip coffee?",
          "Espresso vs drip coffee: which contains more caffeine?"],
         [("Does drip coffee have more caffeine than espresso?", "swap"), ("Does espresso have less caffeine than drip coffee?", "sib"),
          ("Does espresso have more caffeine than green tea?", "ent")]),
        ("How long should I steep cold brew?",
         ["What's the right steeping time for cold brew coffee?", "How many hours does cold brew need to steep?",
          "For how long do I let cold brew sit?"],
         [("How long should I steep green tea?", "ent"), ("How long can I keep cold brew in the fridge?", "sib"),
          ("How long should I steep cold brew concentrate for iced lattes?", "qual")]),
        ("Should coffee beans be stored in the freezer?",
         ["Is it a good idea to keep coffee beans in the freezer?", "Can I freeze my coffee beans to keep them fresh?",
          "Is freezing coffee beans a good way to store them?"],
         [("Should ground coffee be stored in the freezer?", "sib"), ("Should coffee beans be stored in the fridge?", "sib"),
          ("Should coffee beans never be stored in the freezer?", "neg")]),
    ],
    "camping": [
        ("How do I keep bears away from my campsite?",
         ["What can I do to stop bears from coming to my campsite?", "How to bear-proof a campsite?",
          "Any tips to keep bears out of my camp?"],
         [("How do I keep raccoons away from my campsite?", "ent"), ("How do I attract bears to my campsite?", "sib"),
          ("What should I do if a bear is already in my campsite?", "sib")]),
        ("What temperature rating should my sleeping bag have for winter camping?",
         ["For winter camping, what sleeping bag temperature rating do I need?", "How warm a sleeping bag do I need to camp in winter?",
          "Which temperature rating is right for a winter camping sleeping bag?"],
         [("What temperature rating should my sleeping bag have for summer camping?", "sib"),
          ("What temperature rating should my tent have for winter camping?", "sib"),
          ("What temperature rating should my child's sleeping bag have for winter camping?", "ent")]),
        ("Is it safe to drink water from a mountain stream?",
         ["Can I safely drink water straight from a mountain stream?", "Is mountain stream water safe to drink?",
          "Should I worry about drinking from a mountain stream?"],
         [("Is it safe to drink water from a mountain stream after boiling it?", "qual"),
          ("Is it safe to swim in a mountain stream?", "sib"), ("Is it safe to drink water from a lake?", "ent")]),
        ("How far from a lake should I pitch my tent?",
         ["What's the minimum distance between my tent and a lake?", "How close to a lake can I set up my tent?",
          "How many feet from a lake should a tent be?"],
         [("How far from a road should I pitch my tent?", "ent"), ("How far from a lake should I dig a latrine?", "sib"),
          ("How many meters from a lake should a tent be?", "unit")]),
    ],
    "spreadsheets": [
        ("How do I remove duplicate rows in Excel?",
         ["What's the way to delete duplicate rows in Excel?", "How can I get rid of repeated rows in an Excel sheet?",
          "Excel: how to drop duplicate rows?"],
         [("How do I highlight duplicate rows in Excel?", "sib"), ("How do I remove duplicate rows in Google Sheets?", "ent"),
          ("How do I remove duplicate columns in Excel?", "sib")]),
        ("How do I freeze the top row in Google Sheets?",
         ["How can I keep the first row visible while scrolling in Google Sheets?", "What are the steps to freeze the header row in Google Sheets?",
          "Google Sheets: how to lock the top row in place?"],
         [("How do I freeze the first column in Google Sheets?", "sib"), ("How do I unfreeze the top row in Google Sheets?", "neg"),
          ("How do I freeze the top 2 rows in Google Sheets?", "num")]),
        ("What does the VLOOKUP function do?",
         ["What is VLOOKUP used for?", "Can you explain what VLOOKUP does?", "How does the VLOOKUP function work?"],
         [("What does the HLOOKUP function do?", "sib"), ("What does the XLOOKUP function do?", "sib"),
          ("Why does VLOOKUP return #N/A?", "sib")]),
        ("How do I convert a date to text in Excel?",
         ["How can I turn a date into a text string in Excel?", "What's the way to change an Excel date into text?",
          "Excel: converting dates to text, how?"],
         [("How do I convert text to a date in Excel?", "swap"), ("How do I convert a date to a number in Excel?", "sib"),
          ("How do I convert a date to text in Python?", "ent")]),
    ],
    "cycling": [
        ("What tire pressure should I use on a road bike?",
         ["How much should I inflate road bike tires?", "What's the right tire pressure for a road bike?",
          "Road bike tires: what pressure do I need?"],
         [("What tire pressure should I use on a mountain bike?", "sib"), ("What tire pressure should I use on a road bike in the rain?", "qual"),
          ("What tire pressure should I use on a road bike for a 100 kg rider?", "num")]),
        ("How often should I oil my bike chain?",
         ["How frequently does a bicycle chain need lubricating?", "When should I lube my bike chain?",
          "How often do I need to lubricate my bike's chain?"],
         [("How often should I replace my bike chain?", "sib"), ("How often should I oil my bike's brakes?", "sib"),
          ("How often should I clean my bike chain?", "sib")]),
        ("Is it legal to ride a bike on the sidewalk in New York?",
         ["Can I legally cycle on the pavement in New York?", "Are bikes allowed on sidewalks in New York?",
          "In New York, is riding a bicycle on the sidewalk allowed?"],
         [("Is it legal to ride a bike on the sidewalk in Chicago?", "ent"), ("Is it legal to ride an e-scooter on the sidewalk in New York?", "ent"),
          ("Is it illegal to ride a bike on the road in New York?", "neg")]),
        ("How do I fix a slipping bike chain?",
         ["My bike chain keeps slipping, how do I repair it?", "What should I do about a chain that slips on my bike?",
          "How to stop my bicycle chain from skipping?"],
         [("How do I fix a broken bike chain?", "sib"), ("How do I fix a squeaking bike chain?", "sib"),
          ("How do I fix a slipping car belt?", "ent")]),
    ],
    "chess": [
        ("How does castling work in chess?",
         ["What are the rules for castling in chess?", "Can you explain castling in chess?", "How do I castle in chess?"],
         [("How does en passant work in chess?", "sib"), ("When is castling not allowed in chess?", "neg"),
          ("How does castling work in Chinese chess?", "ent")]),
        ("What is the best opening for beginners in chess?",
         ["Which chess opening should a beginner learn first?", "What's a good chess opening for new players?",
          "Best chess opening for a beginner?"],
         [("What is the best opening for advanced players in chess?", "sib"), ("What is the best defense for beginners in chess?", "sib"),
          ("What is the worst opening for beginners in chess?", "sib")]),
        ("How many moves does a chess game last on average?",
         ["What's the average length of a chess game in moves?", "On average, how many moves are in a game of chess?",
          "How long is a typical chess game, in moves?"],
         [("How many minutes does a chess game last on average?", "unit"), ("How many moves does a checkers game last on average?", "ent"),
          ("How many moves does the longest chess game last?", "sib")]),
        ("Can a pawn move backwards in chess?",
         ["Is a pawn allowed to move backward in chess?", "In chess, can pawns go backwards?", "Do pawns ever move back in chess?"],
         [("Can a pawn move sideways in chess?", "sib"), ("Can a king move backwards in chess?", "ent"),
          ("Can a pawn capture backwards in chess?", "sib")]),
    ],
    "sewing": [
        ("What needle size should I use for denim?",
         ["Which needle size is right for sewing denim?", "What size needle do I need to sew jeans fabric?",
          "For denim, what sewing needle size works best?"],
         [("What needle size should I use for silk?", "sib"), ("What thread weight should I use for denim?", "sib"),
          ("What needle size should I use for hand sewing denim?", "qual")]),
        ("How do I hem pants without a sewing machine?",
         ["What's the way to hem trousers by hand?", "Can I hem my pants without using a sewing machine?",
          "How to shorten pants with no sewing machine?"],
         [("How do I hem pants with a sewing machine?", "neg"), ("How do I hem a skirt without a sewing machine?", "ent"),
          ("How do I lengthen pants without a sewing machine?", "sib")]),
        ("Why does my sewing machine thread keep breaking?",
         ["What makes the thread on my sewing machine snap all the time?", "My sewing machine thread keeps snapping, why?",
          "Why is the thread breaking on my sewing machine?"],
         [("Why does my sewing machine needle keep breaking?", "sib"), ("Why does my sewing machine thread keep bunching?", "sib"),
          ("Why does my serger thread keep breaking?", "ent")]),
        ("Should I wash fabric before sewing it?",
         ["Do I need to prewash fabric before I sew?", "Is it necessary to wash fabric before sewing?",
          "Should fabric be washed before I start sewing?"],
         [("Should I iron fabric before sewing it?", "sib"), ("Should I wash wool fabric before sewing it?", "qual"),
          ("Should I wash a garment after sewing it?", "sib")]),
    ],
    "aquarium": [
        ("How often should I change the water in a 20 gallon fish tank?",
         ["How frequently do I need to change the water in a 20-gallon aquarium?", "For a 20 gallon tank, how often should water be changed?",
          "What's the water change schedule for a 20 gallon aquarium?"],
         [("How often should I change the water in a 5 gallon fish tank?", "num"), ("How often should I change the filter in a 20 gallon fish tank?", "sib"),
          ("How often should I change the water in a 20 liter fish tank?", "unit")]),
        ("What temperature do betta fish need?",
         ["What water temperature is best for a betta?", "How warm should the water be for betta fish?",
          "Betta fish: what temperature should the tank be?"],
         [("What temperature do goldfish need?", "ent"), ("What pH do betta fish need?", "sib"),
          ("What temperature do betta fish eggs need?", "qual")]),
        ("Can I keep a goldfish in a bowl?",
         ["Is a bowl okay for a goldfish?", "Is it fine to keep goldfish in a fishbowl?", "Can goldfish live in a bowl?"],
         [("Can I keep a goldfish in a pond?", "sib"), ("Can I keep a betta in a bowl?", "ent"),
          ("Can I keep two goldfish in a bowl?", "num")]),
        ("Why is my aquarium water cloudy?",
         ["What makes fish tank water go cloudy?", "My aquarium water is cloudy, why?", "What causes cloudy water in an aquarium?"],
         [("Why is my aquarium water green?", "sib"), ("Why is my aquarium water not cloudy after a water change?", "neg"),
          ("Why is my pond water cloudy?", "ent")]),
    ],
    "printers": [
        ("Why is my printer printing blank pages?",
         ["My printer only prints empty pages, why?", "What causes a printer to print blank pages?",
          "Why does my printer keep putting out blank sheets?"],
         [("Why is my printer printing streaky pages?", "sib"), ("Why is my printer not printing at all?", "neg"),
          ("Why is my scanner scanning blank pages?", "ent")]),
        ("How do I connect my printer to Wi-Fi?",
         ["How can I get my printer on my wireless network?", "What are the steps to connect a printer to WiFi?",
          "Printer Wi-Fi setup: how do I do it?"],
         [("How do I disconnect my printer from Wi-Fi?", "neg"), ("How do I connect my printer to my laptop with USB?", "sib"),
          ("How do I connect my printer to a new Wi-Fi network?", "qual")]),
        ("How do I cancel a print job on Windows?",
         ["How can I stop a print job in Windows?", "Windows: how to cancel something I sent to the printer?",
          "What's the way to cancel printing on a Windows PC?"],
         [("How do I cancel a print job on a Mac?", "ent"), ("How do I pause a print job on Windows?", "sib"),
          ("How do I cancel all print jobs on Windows?", "scope")]),
        ("Can I use third-party ink cartridges in an HP printer?",
         ["Will non-HP ink cartridges work in my HP printer?", "Is it okay to put generic ink in an HP printer?",
          "Do HP printers accept third party cartridges?"],
         [("Can I use third-party ink cartridges in a Canon printer?", "ent"), ("Can I use third-party toner cartridges in an HP printer?", "sib"),
          ("Can I refill ink cartridges in an HP printer?", "sib")]),
    ],
    "linux": [
        ("How do I find which process is using port 8080 on Linux?",
         ["What's using port 8080 on my Linux machine?", "On Linux, how can I see which program is listening on port 8080?",
          "Linux: find the process bound to port 8080?"],
         [("How do I find which process is using port 8443 on Linux?", "num"), ("How do I find which process is using port 8080 on Windows?", "ent"),
          ("How do I kill the process using port 8080 on Linux?", "sib")]),
        ("How do I check disk space on Linux?",
         ["How can I see how much free disk space I have on Linux?", "What command shows disk usage on Linux?",
          "Linux: how to check free space on my disks?"],
         [("How do I check memory usage on Linux?", "sib"), ("How do I free up disk space on Linux?", "sib"),
          ("How do I check disk space on macOS?", "ent")]),
        ("How do I make a file executable on Linux?",
         ["What's the command to make a file executable in Linux?", "How can I give a file execute permission on Linux?",
          "Linux: how to chmod a file so I can run it?"],
         [("How do I make a file read-only on Linux?", "sib"), ("How do I make a file not executable on Linux?", "neg"),
          ("How do I make every file in a folder executable on Linux?", "scope")]),
        ("How do I copy files from my laptop to a remote server?",
         ["What's the way to transfer files from my laptop to a remote server?", "How can I send files from my computer to a server over SSH?",
          "Copying files from a laptop to a remote server: how?"],
         [("How do I copy files from a remote server to my laptop?", "swap"), ("How do I move files from my laptop to a remote server?", "sib"),
          ("How do I copy folders from my laptop to a remote server?", "sib")]),
    ],
    "parenting": [
        ("At what age can a baby start eating solid food?",
         ["When should I start giving my baby solids?", "How old should a baby be before eating solid food?",
          "When can babies begin solid foods?"],
         [("At what age can a baby start drinking water?", "sib"), ("At what age can a baby start eating peanuts?", "sib"),
          ("At what age can a puppy start eating solid food?", "ent")]),
        ("How much screen time is okay for a 5 year old?",
         ["How many hours of screens a day are fine for a five-year-old?", "What's a healthy amount of screen time for a 5-year-old?",
          "For a five year old, how much screen time is reasonable?"],
         [("How much screen time is okay for a 2 year old?", "num"), ("How much screen time is okay for a 5 year old per week?", "unit"),
          ("How much sleep is okay for a 5 year old?", "sib")]),
        ("How do I get my toddler to sleep through the night?",
         ["What can I do so my toddler sleeps all night?", "My toddler keeps waking at night, how do I help them sleep through?",
          "Tips for getting a toddler to sleep the whole night?"],
         [("How do I get my newborn to sleep through the night?", "ent"), ("How do I get my toddler to nap during the day?", "sib"),
          ("How do I get my toddler to stop sleeping in our bed?", "sib")]),
        ("When should a child stop using a car seat?",
         ["At what age can a kid stop using a car seat?", "How old does a child have to be to ride without a car seat?",
          "When is a child too big for a car seat?"],
         [("When should a child stop using a booster seat?", "sib"), ("When should a child start using a car seat?", "sib"),
          ("When should a child stop using a high chair?", "sib")]),
    ],
    "hiking": [
        ("How much water should I bring on a 10 mile hike?",
         ["For a ten-mile hike, how much water do I need?", "How many liters of water should I carry on a 10 mile hike?",
          "What's the right amount of water to take on a 10-mile hike?"],
         [("How much water should I bring on a 20 mile hike?", "num"), ("How much water should I bring on a 10 km hike?", "unit"),
          ("How much food should I bring on a 10 mile hike?", "sib")]),
        ("What should I do if I get lost while hiking?",
         ["I got lost on a hike, what do I do?", "What's the right thing to do when lost on a hiking trail?",
          "If I lose the trail while hiking, what should I do?"],
         [("What should I do if my friend gets lost while hiking?", "ent"), ("What should I do if I get injured while hiking?", "sib"),
          ("How do I avoid getting lost while hiking?", "sib")]),
        ("Are trail runners better than hiking boots?",
         ["Should I wear trail runners instead of hiking boots?", "Trail running shoes or hiking boots, which is better?",
          "Is it better to hike in trail runners than in boots?"],
         [("Are hiking boots worse than trail runners in snow?", "qual"), ("Are trail runners better than hiking sandals?", "ent"),
          ("Are trail runners better than hiking boots for people with weak ankles?", "qual")]),
        ("How do I prevent blisters when hiking?",
         ["What can I do to avoid getting blisters on a hike?", "How to stop blisters forming while hiking?",
          "Any way to keep from getting blisters on hikes?"],
         [("How do I treat blisters when hiking?", "sib"), ("How do I prevent blisters when running?", "sib"),
          ("How do I prevent chafing when hiking?", "sib")]),
    ],
}

# topic: [(first turn, assistant turn, [reworded first turns], follow-up, [reworded follow-ups],
#          [(first turn whose answer differs, kind)], [(follow-up trap, kind)])]
CONVERSATIONS: dict[str, list[tuple]] = {
    "accounts": [
        ("I use the Android app.", "Got it, the Android app.", ["I'm on the Android app."],
         "How do I change my password?", ["How can I update my password?", "Where do I change the password?"],
         [("I use the iPhone app.", "ent"), ("I don't use the app, only the website.", "neg")],
         [("How do I change my username?", "sib")]),
        ("My account is a business account.", "Thanks, a business account.", ["I have a business account."],
         "Can I add more users?", ["Is it possible to add extra users?"],
         [("My account is a personal account.", "sib"), ("My account is a free account.", "sib")],
         [("Can I remove users?", "sib")]),
    ],
    "coffee": [
        ("I have a French press.", "Nice, a French press.", ["I own a French press."],
         "What grind size should I use?", ["How coarse should I grind the beans?", "Which grind size is right?"],
         [("I have an espresso machine.", "ent"), ("I have a pour-over cone.", "ent")],
         [("How much coffee should I use?", "sib")]),
        ("I'm brewing for 2 people.", "Okay, two people.", ["I'm making coffee for two people."],
         "How many scoops do I need?", ["How many scoops of coffee should I use?"],
         [("I'm brewing for 6 people.", "num"), ("I'm brewing for 2 people, decaf only.", "qual")],
         [("How many cups do I need?", "sib")]),
    ],
    "camping": [
        ("We're camping in Yosemite in July.", "Sounds great, Yosemite in July.", ["We're going camping in Yosemite this July."],
         "Do we need a permit?", ["Is a permit required?", "Do we have to get a permit?"],
         [("We're camping in Yosemite in January.", "sib"), ("We're camping in Zion in July.", "ent")],
         [("Do we need a bear canister?", "sib")]),
        ("I'm camping with a 3 year old.", "Okay, with a three-year-old.", ["I'm going camping with my 3-year-old."],
         "What should I pack?", ["What do I need to bring?"],
         [("I'm camping with a dog.", "ent"), ("I'm camping alone.", "sib")],
         [("What should I cook?", "sib")]),
    ],
    "spreadsheets": [
        ("I'm using Excel on a Mac.", "Excel on a Mac, got it.", ["I use Excel on my Mac."],
         "What's the shortcut to insert a row?", ["Which keyboard shortcut inserts a row?", "How do I insert a row with the keyboard?"],
         [("I'm using Excel on Windows.", "ent"), ("I'm using Google Sheets on a Mac.", "ent")],
         [("What's the shortcut to delete a row?", "sib")]),
        ("My data has 50,000 rows.", "Okay, 50,000 rows.", ["My sheet has 50000 rows."],
         "Should I use a pivot table?", ["Is a pivot table a good idea?"],
         [("My data has 50 rows.", "num"), ("My data has 50,000 columns.", "unit")],
         [("Should I use a chart?", "sib")]),
    ],
    "cycling": [
        ("I ride a carbon road bike.", "Nice, a carbon road bike.", ["I have a carbon road bike."],
         "How tight should the bolts be?", ["What torque should I use on the bolts?"],
         [("I ride an aluminium road bike.", "sib"), ("I ride a carbon mountain bike.", "sib")],
         [("How loose should the bolts be?", "sib")]),
        ("I commute 5 miles each way.", "Got it, five miles each way.", ["My commute is 5 miles each way."],
         "Is an e-bike worth it?", ["Would an e-bike be worth buying?", "Is it worth getting an e-bike?"],
         [("I commute 25 miles each way.", "num"), ("I commute 5 kilometers each way.", "unit")],
         [("Is a folding bike worth it?", "ent")]),
    ],
    "chess": [
        ("I'm rated 1200.", "Okay, 1200.", ["My rating is 1200."],
         "What should I study next?", ["What should I learn next?", "What do I study now?"],
         [("I'm rated 2200.", "num"), ("I'm not rated yet.", "neg")],
         [("What should I play next?", "sib")]),
        ("I play mostly blitz.", "Blitz, got it.", ["I mostly play blitz."],
         "Which opening should I use as white?", ["What opening should I play with white?"],
         [("I play mostly correspondence chess.", "sib"), ("I play mostly bullet.", "sib")],
         [("Which opening should I use as black?", "sib")]),
    ],
    "sewing": [
        ("I'm sewing a wool coat.", "A wool coat, nice.", ["I'm making a wool coat."],
         "What lining should I use?", ["Which lining fabric should I pick?"],
         [("I'm sewing a cotton dress.", "ent"), ("I'm sewing a wool hat.", "ent")],
         [("What interfacing should I use?", "sib")]),
        ("My machine is a Singer from 1970.", "A 1970 Singer, okay.", ["I have a Singer machine from 1970."],
         "Can it sew leather?", ["Will it handle leather?", "Is it able to sew leather?"],
         [("My machine is a Singer from 2020.", "num"), ("My machine is a Brother from 1970.", "ent")],
         [("Can it sew denim?", "sib")]),
    ],
    "aquarium": [
        ("I have a 10 gallon tank.", "Okay, 10 gallons.", ["My tank is 10 gallons."],
         "How many fish can I keep?", ["How many fish can go in it?", "How many fish will it hold?"],
         [("I have a 75 gallon tank.", "num"), ("I have a 10 liter tank.", "unit")],
         [("How many plants can I keep?", "sib")]),
        ("I keep freshwater fish.", "Freshwater, got it.", ["My fish are freshwater fish."],
         "How often should I test the water?", ["How frequently do I need to test the water?"],
         [("I keep saltwater fish.", "sib"), ("I keep freshwater shrimp.", "ent")],
         [("How often should I feed them?", "sib")]),
    ],
    "printers": [
        ("I have a Brother laser printer.", "A Brother laser printer, okay.", ["My printer is a Brother laser."],
         "How do I replace the toner?", ["How can I change the toner?", "What's the way to swap the toner?"],
         [("I have a Brother inkjet printer.", "sib"), ("I have an HP laser printer.", "ent")],
         [("How do I replace the drum?", "sib")]),
        ("I'm on Windows 11.", "Windows 11, got it.", ["I use Windows 11."],
         "How do I set the default printer?", ["How can I change the default printer?"],
         [("I'm on Windows 7.", "num"), ("I'm on macOS.", "ent")],
         [("How do I remove a printer?", "sib")]),
    ],
    "linux": [
        ("I'm running Ubuntu 22.04.", "Ubuntu 22.04, okay.", ["My machine runs Ubuntu 22.04."],
         "How do I install Docker?", ["What's the way to install Docker?", "How can I get Docker installed?"],
         [("I'm running Fedora 39.", "ent"), ("I'm running Ubuntu 16.04.", "num")],
         [("How do I uninstall Docker?", "neg")]),
        ("I don't have root access.", "Understood, no root access.", ["I do not have root access."],
         "How do I install Python packages?", ["How can I install Python packages?"],
         [("I have root access.", "neg"), ("I don't have internet access.", "sib")],
         [("How do I install Node packages?", "ent")]),
    ],
    "parenting": [
        ("My son is 4 months old.", "Four months, okay.", ["My son is four months old."],
         "How much should he sleep?", ["How many hours should he be sleeping?"],
         [("My son is 4 years old.", "unit"), ("My son is 14 months old.", "num")],
         [("How much should he eat?", "sib")]),
        ("My daughter is allergic to eggs.", "Egg allergy, noted.", ["My daughter has an egg allergy."],
         "Can she get the flu vaccine?", ["Is the flu shot safe for her?", "Can she have the flu vaccine?"],
         [("My daughter is allergic to penicillin.", "ent"), ("My daughter is not allergic to anything.", "neg")],
         [("Can she get the measles vaccine?", "sib")]),
    ],
    "hiking": [
        ("I'm hiking at 4,000 meters.", "4,000 meters, okay.", ["I'm going hiking at 4000 meters."],
         "How do I avoid altitude sickness?", ["How can I prevent altitude sickness?", "What can I do to avoid getting altitude sickness?"],
         [("I'm hiking at 1,000 meters.", "num"), ("I'm hiking at 4,000 feet.", "unit")],
         [("How do I treat altitude sickness?", "sib")]),
        ("I'm hiking in the desert in summer.", "Desert in summer, got it.", ["I'll be hiking in the desert this summer."],
         "How much water should I carry?", ["How much water do I need to carry?"],
         [("I'm hiking in the desert in winter.", "sib"), ("I'm hiking in the forest in summer.", "ent")],
         [("How much food should I carry?", "sib")]),
    ],
}


def build() -> list[dict]:
    rows: list[dict] = []

    def add(**kw) -> None:
        rows.append(kw)

    for topic, groups in PARAPHRASES.items():
        for i, (base, same, traps) in enumerate(groups):
            group = f"{topic}/{i}"
            for b in same:
                add(a=base, b=b, label="same", kind="paraphrase", topic=topic, group=group, split="paraphrase-set")
            for trap, kind in traps:
                add(a=base, b=trap, label="different", kind=kind, topic=topic, group=group, split="paraphrase-set")
            # A trap cached first, then the base asked: the same pair the other way round.
            for trap, kind in traps[:1]:
                add(a=trap, b=same[0], label="different", kind=kind, topic=topic, group=group, split="paraphrase-set")
    for topic, convs in CONVERSATIONS.items():
        for i, (first, reply, firsts, follow, follows, history_traps, follow_traps) in enumerate(convs):
            group = f"{topic}/conv{i}"
            ctx = [first, reply]

            def conv(b, label, kind, ctx_b, follow=follow, topic=topic, group=group, ctx=ctx):
                add(a=follow, b=b, label=label, kind=kind, topic=topic, group=group, split="conversation-set",
                    context_a=ctx, context_b=ctx_b)

            for f in follows:
                conv(f, "same", "conversation: follow-up reworded", ctx)
            for h in firsts:
                conv(follow, "same", "conversation: history reworded", [h, reply])
                for f in follows[:1]:
                    conv(f, "same", "conversation: both reworded", [h, reply])
            for h, kind in history_traps:
                conv(follow, "different", f"history:{kind}", [h, reply])
                conv(follows[0], "different", f"history:{kind}", [h, reply])
            for f, kind in follow_traps:
                conv(f, "different", f"follow-up:{kind}", ctx)
    return rows


def main() -> None:
    rows = build()
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    same = sum(r["label"] == "same" for r in rows)
    print(f"{OUT.name}: {len(rows)} pairs, {same} true repeats, {len(rows) - same} traps")


if __name__ == "__main__":
    main()
