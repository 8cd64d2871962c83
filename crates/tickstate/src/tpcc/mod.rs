//! An in-memory TPC-C laid out in 64-bit cells, as the paper's §5.5 application: one mutator runs
//! the five transactions (standard mix) against a state that a checkpointer ([`crate::TickState`])
//! or the ARIES baseline ([`crate::aries`]) makes durable.
//!
//! The tables are real, fixed-size row arrays in one vector of cells ([`Layout`]): WAREHOUSE,
//! DISTRICT, CUSTOMER, ITEM, STOCK, ORDER with its ORDER-LINEs, NEW-ORDER and HISTORY; sizes are
//! flags ([`TpccConfig`]) and bounded. Every transaction is a pure function of the state and its
//! [`Input`] (the logical log records inputs, and replay re-executes them), and goes through a
//! [`Store`], which gives it cell reads and writes and transaction boundaries (begin, commit,
//! abort): [`WithUndo`] for plain cells (a vector, a `TickState`) keeps an undo list so that an
//! abort restores every cell the transaction wrote; ARIES logs and rolls back in its own way.
//!
//! Where we depart from the TPC-C specification, for boundedness or because the paper's
//! experiment does not depend on it (each named again where it is implemented):
//! - ORDER is a ring of `order_slots` orders per district (slot = order id mod `order_slots`); a
//!   new order reuses the slot of an order `order_slots` older, which must have been delivered
//!   (else the New-Order fails with [`TpccError::OrderRingFull`]: raise `order_slots`). The
//!   order a slot held is gone once reused (Order-Status then finds no lines for it).
//! - NEW-ORDER is a FIFO per district: the undelivered orders are exactly the ids
//!   `[head, next_o_id)` (TPC-C inserts new orders with increasing ids and Delivery takes the
//!   smallest), so the table is its `head` cell.
//! - HISTORY is a ring of `history_slots` rows (TPC-C never reads it).
//! - Strings are not stored: names are codes (a customer's last name is its syllable number
//!   0..=999), `C_DATA` is a 64-bit digest updated as Payment prescribes for bad-credit customers,
//!   and the `S_DIST_xx` / `I_DATA` / `S_DATA` texts are functions of the ids.
//! - Sizes scale: `items` (spec 100 000), `customers_per_district` (spec 3 000, and as many
//!   initial orders per district, the last 30 % undelivered).
//!
//! Invariants (checked by the unit tests, TPC-C's consistency conditions 1–4): `W_YTD` is the sum
//! of its districts' `D_YTD`; `D_NEXT_O_ID - 1` is the newest order id of the district; the
//! undelivered orders are exactly `[head, D_NEXT_O_ID)`, each without a carrier; every order has
//! `O_OL_CNT` order lines.

mod input;
mod txn;

pub use input::{Generator, Input, OrderLineInput, Selector};
pub use txn::{execute, populate, Outcome};

/// Districts per warehouse (fixed by TPC-C).
pub const DISTRICTS: u32 = 10;
/// Most order lines in one order (TPC-C: 5..=15).
pub const MAX_ORDER_LINES: usize = 15;

/// Cells of one WAREHOUSE row: `W_YTD` (cents), `W_TAX` (1/10 000), name code, spare.
pub const WAREHOUSE_CELLS: usize = 4;
/// Cells of one DISTRICT row: `D_YTD`, `D_TAX`, `D_NEXT_O_ID`, NEW-ORDER head (oldest undelivered).
pub const DISTRICT_CELLS: usize = 4;
/// Cells of one CUSTOMER row: `C_BALANCE` (i64 cents), `C_YTD_PAYMENT`, `C_PAYMENT_CNT`,
/// `C_DELIVERY_CNT`, `C_DISCOUNT` (1/10 000), credit (0 good, 1 bad) | last name << 8 | first
/// name code << 24, id of the customer's newest order, `C_DATA` digest.
pub const CUSTOMER_CELLS: usize = 8;
/// Cells of one ITEM row: `I_PRICE` (cents), `I_IM_ID`, original flag, name code.
pub const ITEM_CELLS: usize = 4;
/// Cells of one STOCK row: `S_QUANTITY`, `S_YTD`, `S_ORDER_CNT`, `S_REMOTE_CNT`.
pub const STOCK_CELLS: usize = 4;
/// Cells of an ORDER header: `O_ID` (0: empty slot), `O_C_ID`, `O_ENTRY_D`,
/// `O_CARRIER_ID` (0: none) | `O_OL_CNT` << 8 | `O_ALL_LOCAL` << 16.
pub const ORDER_HEADER_CELLS: usize = 4;
/// Cells of one ORDER-LINE: `OL_I_ID` | `OL_SUPPLY_W_ID` << 32, `OL_QUANTITY`, `OL_AMOUNT`,
/// `OL_DELIVERY_D` (0: not delivered).
pub const ORDER_LINE_CELLS: usize = 4;
/// Cells of an order slot: the header and room for 15 lines (512 bytes).
pub const ORDER_CELLS: usize = ORDER_HEADER_CELLS + MAX_ORDER_LINES * ORDER_LINE_CELLS;
/// Cells of one HISTORY row: customer (id | district << 32 | warehouse << 40), paying district
/// | warehouse << 8, `H_DATE`, `H_AMOUNT`.
pub const HISTORY_CELLS: usize = 4;

/// The sizes of a TPC-C database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TpccConfig {
    /// Warehouses (TPC-C's scale factor).
    pub warehouses: u32,
    /// Items (TPC-C: 100 000), and stock rows per warehouse.
    pub items: u32,
    /// Customers per district (TPC-C: 3 000), and initial orders per district.
    pub customers_per_district: u32,
    /// Order slots per district (a ring; see the module documentation).
    pub order_slots: u32,
    /// HISTORY rows kept (a ring).
    pub history_slots: u32,
}

impl TpccConfig {
    /// TPC-C's sizes for `warehouses` warehouses, with 8 192 order slots per district and
    /// 65 536 history rows.
    pub fn standard(warehouses: u32) -> TpccConfig {
        TpccConfig {
            warehouses,
            items: 100_000,
            customers_per_district: 3_000,
            order_slots: 8_192,
            history_slots: 65_536,
        }
    }

    /// Checks the sizes: everything positive, at most 10 000 warehouses and 1 000 000 items,
    /// room in the order ring for the initial orders, and a state of at most 2^32 cells.
    pub fn validate(&self) -> Result<(), TpccError> {
        let bad = |what: String| Err(TpccError::Config(what));
        if self.warehouses == 0 || self.warehouses > 10_000 {
            return bad(format!("warehouses = {}: use 1..=10000", self.warehouses));
        }
        if self.items < 100 || self.items > 1_000_000 {
            return bad(format!("items = {}: use 100..=1000000", self.items));
        }
        if self.customers_per_district < 30 || self.customers_per_district > 100_000 {
            return bad(format!(
                "customers per district = {}: use 30..=100000",
                self.customers_per_district
            ));
        }
        if self.order_slots < self.customers_per_district + 64 || self.order_slots > 1 << 22 {
            return bad(format!(
                "order slots = {}: need at least the initial orders per district ({}) + 64, at \
                 most 4194304",
                self.order_slots, self.customers_per_district
            ));
        }
        if self.history_slots == 0 || self.history_slots > 1 << 24 {
            return bad(format!(
                "history slots = {}: use 1..=16777216",
                self.history_slots
            ));
        }
        let cells = Layout::cells_of(self);
        if cells > u32::MAX as u128 {
            return bad(format!("{cells} cells: more than 2^32"));
        }
        Ok(())
    }
}

/// Where each table lives in the cell vector (all offsets in cells).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The sizes.
    pub config: TpccConfig,
    warehouse: usize,
    district: usize,
    customer: usize,
    item: usize,
    stock: usize,
    order: usize,
    history: usize,
    /// One cell: the number of HISTORY rows ever inserted.
    history_count: usize,
    cells: usize,
}

impl Layout {
    fn cells_of(config: &TpccConfig) -> u128 {
        let w = config.warehouses as u128;
        let districts = w * DISTRICTS as u128;
        w * WAREHOUSE_CELLS as u128
            + districts * DISTRICT_CELLS as u128
            + districts * config.customers_per_district as u128 * CUSTOMER_CELLS as u128
            + config.items as u128 * ITEM_CELLS as u128
            + w * config.items as u128 * STOCK_CELLS as u128
            + districts * config.order_slots as u128 * ORDER_CELLS as u128
            + config.history_slots as u128 * HISTORY_CELLS as u128
            + 1
    }

    /// The layout of `config` (validated).
    pub fn new(config: TpccConfig) -> Result<Layout, TpccError> {
        config.validate()?;
        let w = config.warehouses as usize;
        let districts = w * DISTRICTS as usize;
        let warehouse = 0;
        let district = warehouse + w * WAREHOUSE_CELLS;
        let customer = district + districts * DISTRICT_CELLS;
        let item = customer + districts * config.customers_per_district as usize * CUSTOMER_CELLS;
        let stock = item + config.items as usize * ITEM_CELLS;
        let order = stock + w * config.items as usize * STOCK_CELLS;
        let history = order + districts * config.order_slots as usize * ORDER_CELLS;
        let history_count = history + config.history_slots as usize * HISTORY_CELLS;
        Ok(Layout {
            config,
            warehouse,
            district,
            customer,
            item,
            stock,
            order,
            history,
            history_count,
            cells: history_count + 1,
        })
    }

    /// Cells of the whole database.
    pub fn cells(&self) -> usize {
        self.cells
    }

    /// First cell of warehouse `w` (1-based, as TPC-C numbers them).
    pub fn warehouse(&self, w: u32) -> usize {
        self.warehouse + (w as usize - 1) * WAREHOUSE_CELLS
    }

    /// First cell of district `d` of warehouse `w` (both 1-based).
    pub fn district(&self, w: u32, d: u32) -> usize {
        self.district + self.district_number(w, d) * DISTRICT_CELLS
    }

    fn district_number(&self, w: u32, d: u32) -> usize {
        (w as usize - 1) * DISTRICTS as usize + (d as usize - 1)
    }

    /// First cell of customer `c` of district `d` of warehouse `w` (all 1-based).
    pub fn customer(&self, w: u32, d: u32, c: u32) -> usize {
        let per = self.config.customers_per_district as usize;
        self.customer + (self.district_number(w, d) * per + (c as usize - 1)) * CUSTOMER_CELLS
    }

    /// First cell of item `i` (1-based).
    pub fn item(&self, i: u32) -> usize {
        self.item + (i as usize - 1) * ITEM_CELLS
    }

    /// First cell of the stock of item `i` in warehouse `w` (1-based).
    pub fn stock(&self, w: u32, i: u32) -> usize {
        let items = self.config.items as usize;
        self.stock + ((w as usize - 1) * items + (i as usize - 1)) * STOCK_CELLS
    }

    /// First cell of the slot holding order `o` of district `d` of warehouse `w`.
    pub fn order(&self, w: u32, d: u32, o: u64) -> usize {
        let slots = self.config.order_slots as usize;
        let slot = (o % slots as u64) as usize;
        self.order + (self.district_number(w, d) * slots + slot) * ORDER_CELLS
    }

    /// First cell of HISTORY row `row` (mod the ring).
    pub fn history(&self, row: u64) -> usize {
        self.history + (row % self.config.history_slots as u64) as usize * HISTORY_CELLS
    }

    /// The cell counting HISTORY rows ever inserted.
    pub fn history_count(&self) -> usize {
        self.history_count
    }
}

/// What can go wrong with TPC-C sizes, inputs or transactions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TpccError {
    /// The sizes are out of range.
    #[error("TPC-C configuration: {0}")]
    Config(String),
    /// A logged input does not decode, or names rows this database does not have.
    #[error("TPC-C input: {0}")]
    BadInput(String),
    /// A New-Order found its district's order ring full of undelivered orders.
    #[error("district {d} of warehouse {w}: all {slots} order slots hold undelivered orders; raise the order slots")]
    OrderRingFull {
        /// Warehouse.
        w: u32,
        /// District.
        d: u32,
        /// Slots per district.
        slots: u32,
    },
}

/// Cell access the transactions need.
pub trait Cells {
    /// Value of cell `index`.
    fn get(&self, index: usize) -> u64;
    /// Set cell `index`.
    fn set(&mut self, index: usize, value: u64);
}

impl Cells for [u64] {
    #[inline]
    fn get(&self, index: usize) -> u64 {
        self[index]
    }
    #[inline]
    fn set(&mut self, index: usize, value: u64) {
        self[index] = value;
    }
}

impl<A: crate::Algorithm> Cells for crate::TickState<A> {
    #[inline]
    fn get(&self, index: usize) -> u64 {
        self.read(index)
    }
    #[inline]
    fn set(&mut self, index: usize, value: u64) {
        self.write(index, value)
    }
}

/// Cells with transaction boundaries: what the transactions run against.
pub trait Store {
    /// Value of cell `index`.
    fn get(&self, index: usize) -> u64;
    /// Set the consecutive cells of one row starting at `index` (ARIES logs one record per call
    /// and page).
    fn set_row(&mut self, index: usize, values: &[u64]);
    /// Set one cell.
    fn set(&mut self, index: usize, value: u64) {
        self.set_row(index, &[value]);
    }
    /// A transaction starts.
    fn begin(&mut self);
    /// The transaction commits.
    fn commit(&mut self);
    /// The transaction rolls back: every cell it set gets its value from before `begin` back.
    fn abort(&mut self);
}

/// A [`Store`] over plain cells: an undo list of the cells set since `begin`.
pub struct WithUndo<'a, C: Cells + ?Sized> {
    cells: &'a mut C,
    undo: Vec<(usize, u64)>,
}

impl<'a, C: Cells + ?Sized> WithUndo<'a, C> {
    /// Transactions over `cells`.
    pub fn new(cells: &'a mut C) -> WithUndo<'a, C> {
        WithUndo {
            cells,
            undo: Vec::new(),
        }
    }
}

impl<C: Cells + ?Sized> Store for WithUndo<'_, C> {
    #[inline]
    fn get(&self, index: usize) -> u64 {
        self.cells.get(index)
    }

    #[inline]
    fn set_row(&mut self, index: usize, values: &[u64]) {
        for (offset, value) in values.iter().enumerate() {
            self.undo
                .push((index + offset, self.cells.get(index + offset)));
            self.cells.set(index + offset, *value);
        }
    }

    fn begin(&mut self) {
        self.undo.clear();
    }

    fn commit(&mut self) {
        self.undo.clear();
    }

    fn abort(&mut self) {
        while let Some((index, value)) = self.undo.pop() {
            self.cells.set(index, value);
        }
    }
}

/// A TPC-C database's static parts: its layout and the customers' last-name index (last names
/// never change, so the index is a function of the sizes and the seed, outside the state).
#[derive(Debug, Clone)]
pub struct Tpcc {
    layout: Layout,
    seed: u64,
    /// Per district: (last name, first name code, customer id), sorted.
    names: Vec<Vec<(u16, u32, u32)>>,
}

impl Tpcc {
    /// The database of `config` whose initial population and inputs derive from `seed`.
    pub fn new(config: TpccConfig, seed: u64) -> Result<Tpcc, TpccError> {
        let layout = Layout::new(config)?;
        let mut names = Vec::with_capacity((config.warehouses * DISTRICTS) as usize);
        for w in 1..=config.warehouses {
            for d in 1..=DISTRICTS {
                let mut district: Vec<(u16, u32, u32)> = (1..=config.customers_per_district)
                    .map(|c| {
                        let (last, first) = txn::customer_names(seed, w, d, c);
                        (last, first, c)
                    })
                    .collect();
                district.sort_unstable();
                names.push(district);
            }
        }
        Ok(Tpcc {
            layout,
            seed,
            names,
        })
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The sizes.
    pub fn config(&self) -> &TpccConfig {
        &self.layout.config
    }

    /// The seed of the population and inputs.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Replay one logged input on plain cells, as recovery's `apply` does: [`Input::Load`]
    /// populates, anything else runs as a transaction.
    pub fn replay(&self, cells: &mut [u64], action: &[u8]) -> Result<Outcome, TpccError> {
        match Input::decode(action, self.config())? {
            Input::Load => {
                populate(self, cells);
                Ok(Outcome::Committed(0))
            }
            input => execute(self, &mut WithUndo::new(cells), &input),
        }
    }

    /// TPC-C's choice among the customers of (`w`, `d`) named `last`: the one at position
    /// ⌈n/2⌉ sorted by first name. When nobody in the district has that name (possible only with
    /// fewer than 1 000 customers per district), customer `last mod customers + 1`.
    pub fn customer_by_last_name(&self, w: u32, d: u32, last: u16) -> u32 {
        let district = &self.names[self.layout.district_number(w, d)];
        let start = district.partition_point(|(name, _, _)| *name < last);
        let end = district.partition_point(|(name, _, _)| *name <= last);
        if start == end {
            return last as u32 % self.config().customers_per_district + 1;
        }
        let n = end - start;
        district[start + n.div_ceil(2) - 1].2
    }
}
